package enginesim

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is everything the engine is told at start. Zero values are not
// meaningful: start from DefaultConfig and override.
type Config struct {
	// Model is the model "path" vLLM would load; it is what /v1/models shows
	// as root, and the served name when ServedModelNames is empty.
	// Default "enginesim/sim-model".
	Model string
	// ServedModelNames are the names listed in /v1/models and accepted in a
	// request's "model". The first one labels the metrics (model_name), as in
	// vLLM. Default: Model.
	ServedModelNames []string
	// Host and Port the OpenAI server binds. Default 0.0.0.0:8000, like vLLM.
	Host string
	Port int
	// MaxModelLen is the context length in tokens: prompt plus max_tokens
	// beyond it is a 400. Default 4096.
	MaxModelLen int
	// TTFT is the prefill time from admission to the first token, ITL the
	// time between later tokens. Each delay is scaled by a random factor in
	// [1-Jitter, 1+Jitter]. Defaults 100ms, 20ms, 0.1. Zero delays are allowed
	// (tokens as fast as the client reads them).
	TTFT   time.Duration
	ITL    time.Duration
	Jitter float64
	// MaxNumSeqs is how many requests generate at once; the rest wait in a
	// FIFO queue (vllm:num_requests_waiting). Default 256, vLLM's default.
	MaxNumSeqs int
	// MaxWaiting bounds the waiting queue; a request beyond it gets a 503.
	// Default 100000. vLLM has no such bound, but an unbounded queue in a
	// load tool only hides the overload.
	MaxWaiting int
	// KVCacheTokens is the KV cache capacity in tokens. A request is only
	// admitted when its context fits; a running request that cannot grow is
	// preempted (vllm:num_preemptions_total) and waits again at the front of
	// the queue. Default 0 means MaxNumSeqs × MaxModelLen, which never
	// preempts. Must be at least MaxModelLen.
	KVCacheTokens int
	// PrefillPerToken is the compute time of one uncached prompt token; it
	// comes on top of TTFT, the fixed part. Default 50µs (20k tokens/s).
	PrefillPerToken time.Duration
	// MaxNumBatchedTokens is the per-step token budget as vLLM's flag: the
	// running decodes take one token each and prefill the rest, so prefill
	// slows as the batch grows. 0 means 2048 (vLLM's default with 256
	// sequences) or MaxNumSeqs when larger; it must be at least MaxNumSeqs.
	MaxNumBatchedTokens int
	// DecodeKnee is the batch size at which a decode step takes twice
	// --itl: ITL × (1 + others/knee). 0 turns the slowdown off. Default 256.
	DecodeKnee int
	// EnablePrefixCaching turns automatic prefix caching on (default, as in
	// vLLM V1). BlockSize is the KV block size in tokens (default 16).
	EnablePrefixCaching bool
	BlockSize           int
	// EnablePromptTokensDetails adds usage.prompt_tokens_details.cached_tokens
	// to answers, as vLLM's flag of that name does. Default off, as in vLLM.
	EnablePromptTokensDetails bool
	// EmbeddingDim is the length of /v1/embeddings vectors. Default 1024.
	EmbeddingDim int
	// KeepAliveTimeout closes idle keep-alive connections, like uvicorn's
	// --timeout-keep-alive. Default 5s.
	KeepAliveTimeout time.Duration
	// FailRate is the fraction of generation requests answered with a
	// vLLM-style 500 instead of being served. Default 0.
	FailRate float64
	// Seed makes generated text, jitter and injected failures repeatable.
	// Default 0.
	Seed uint64
	// MCPPort is the management MCP server's port on Host; 0 means off.
	// Default 0.
	MCPPort int
	// ShutdownTimeout is how long a SIGTERM waits for running streams before
	// cutting them. Default 10s.
	ShutdownTimeout time.Duration
	// APIKeys are vLLM's --api-key values (or VLLM_API_KEY, UseEnvKey):
	// with any, the OpenAI routes need one as a bearer token (apikey.go).
	// Default none.
	APIKeys []string
}

// defaultBatchedTokens is vLLM's max-num-batched-tokens for an API server
// with 256 sequences; blockSizes are the block sizes vLLM accepts.
const (
	defaultBatchedTokens = 2048
	maxEmbeddingDim      = 65536
)

var blockSizes = []int{1, 8, 16, 32, 64, 128}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Model:               "enginesim/sim-model",
		Host:                "0.0.0.0",
		Port:                8000,
		MaxModelLen:         4096,
		TTFT:                100 * time.Millisecond,
		ITL:                 20 * time.Millisecond,
		Jitter:              0.1,
		MaxNumSeqs:          256,
		MaxWaiting:          100000,
		PrefillPerToken:     50 * time.Microsecond,
		DecodeKnee:          256,
		BlockSize:           16,
		EmbeddingDim:        1024,
		EnablePrefixCaching: true,
		KeepAliveTimeout:    5 * time.Second,
		ShutdownTimeout:     10 * time.Second,
	}
}

// names is a flag.Value for --served-model-name: repeatable, and each value
// may be a comma- or space-separated list (vLLM takes nargs="+").
type names struct{ list *[]string }

func (n names) String() string {
	if n.list == nil {
		return ""
	}
	return strings.Join(*n.list, ",")
}

func (n names) Set(v string) error {
	*n.list = append(*n.list, strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })...)
	return nil
}

// RegisterFlags binds c's fields to fs under vLLM's flag names. c holds the
// defaults shown in -help.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Model, "model", c.Model, "model path or name; /v1/models shows it as root")
	fs.Var(names{&c.ServedModelNames}, "served-model-name", "name(s) served in /v1/models; repeatable or comma-separated (default: --model)")
	fs.StringVar(&c.Host, "host", c.Host, "address to bind")
	fs.IntVar(&c.Port, "port", c.Port, "port of the OpenAI server")
	fs.IntVar(&c.MaxModelLen, "max-model-len", c.MaxModelLen, "context length in tokens (prompt + max_tokens)")
	fs.DurationVar(&c.TTFT, "ttft", c.TTFT, "time to first token after admission")
	fs.DurationVar(&c.ITL, "itl", c.ITL, "inter-token latency")
	fs.Float64Var(&c.Jitter, "jitter", c.Jitter, "random spread of each delay, as a fraction (0 to 1)")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "requests generating at once; the rest wait in a FIFO queue")
	fs.IntVar(&c.MaxWaiting, "max-waiting", c.MaxWaiting, "waiting requests beyond which new ones get 503")
	fs.IntVar(&c.KVCacheTokens, "kv-cache-tokens", c.KVCacheTokens, "KV cache capacity in tokens (0: max-num-seqs × max-model-len, never preempts)")
	fs.DurationVar(&c.PrefillPerToken, "prefill-per-token", c.PrefillPerToken, "compute time of one uncached prompt token, on top of --ttft")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "per-step token budget shared by decodes and prefills (0: 2048, or --max-num-seqs when larger)")
	fs.IntVar(&c.DecodeKnee, "decode-knee", c.DecodeKnee, "batch size at which a decode step takes twice --itl (0: no slowdown)")
	fs.BoolVar(&c.EnablePrefixCaching, "enable-prefix-caching", c.EnablePrefixCaching, "automatic prefix caching (--no-enable-prefix-caching or =false turns it off)")
	fs.BoolFunc("no-enable-prefix-caching", "turn automatic prefix caching off, as vLLM's flag", func(v string) error {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return err
		}
		c.EnablePrefixCaching = !off
		return nil
	})
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "KV cache block size in tokens (1, 8, 16, 32, 64 or 128)")
	fs.BoolVar(&c.EnablePromptTokensDetails, "enable-prompt-tokens-details", c.EnablePromptTokensDetails, "report usage.prompt_tokens_details.cached_tokens, as vLLM's flag")
	fs.IntVar(&c.EmbeddingDim, "embedding-dim", c.EmbeddingDim, "length of /v1/embeddings vectors")
	fs.DurationVar(&c.KeepAliveTimeout, "keepalive-timeout", c.KeepAliveTimeout, "close idle keep-alive connections after this long, like uvicorn")
	fs.Float64Var(&c.FailRate, "fail-rate", c.FailRate, "fraction of generation requests answered with a 500 (0 to 1)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed for generated text, jitter and injected failures")
	fs.IntVar(&c.MCPPort, "mcp-port", c.MCPPort, "port of the management MCP server at /mcp (0: off)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "on SIGINT/SIGTERM, wait this long for running requests")
	fs.Func("api-key", "require this key as Authorization: Bearer on the OpenAI routes, as vLLM's flag; repeatable (default: VLLM_API_KEY)", func(v string) error {
		if v == "" {
			return errors.New("the key is empty")
		}
		c.APIKeys = append(c.APIKeys, v)
		return nil
	})
}

// Validate fills derived defaults (served names, KV capacity) and reports
// every invalid field at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if strings.TrimSpace(c.Model) == "" {
		bad("--model must not be empty")
	}
	if len(c.ServedModelNames) == 0 && c.Model != "" {
		c.ServedModelNames = []string{c.Model}
	}
	seen := map[string]bool{}
	for _, n := range c.ServedModelNames {
		if seen[n] {
			bad("--served-model-name %q is given twice", n)
		}
		seen[n] = true
	}
	if c.Port < 0 || c.Port > 65535 {
		bad("--port %d is not a TCP port (0-65535)", c.Port)
	}
	if c.MCPPort < 0 || c.MCPPort > 65535 {
		bad("--mcp-port %d is not a TCP port (0-65535; 0 turns it off)", c.MCPPort)
	}
	if c.MaxModelLen < 16 {
		bad("--max-model-len %d is too small; give at least 16 tokens", c.MaxModelLen)
	}
	if c.TTFT < 0 || c.ITL < 0 {
		bad("--ttft and --itl must not be negative (got %s, %s)", c.TTFT, c.ITL)
	}
	if !(c.Jitter >= 0 && c.Jitter <= 1) {
		bad("--jitter %v must be between 0 and 1", c.Jitter)
	}
	if !(c.FailRate >= 0 && c.FailRate <= 1) {
		bad("--fail-rate %v must be between 0 and 1", c.FailRate)
	}
	if c.MaxNumSeqs < 1 {
		bad("--max-num-seqs %d must be at least 1", c.MaxNumSeqs)
	}
	if c.MaxWaiting < 0 {
		bad("--max-waiting %d must not be negative", c.MaxWaiting)
	}
	if c.KeepAliveTimeout <= 0 {
		bad("--keepalive-timeout %s must be positive", c.KeepAliveTimeout)
	}
	if c.ShutdownTimeout < 0 {
		bad("--shutdown-timeout %s must not be negative", c.ShutdownTimeout)
	}
	if c.PrefillPerToken < 0 {
		bad("--prefill-per-token %s must not be negative", c.PrefillPerToken)
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = max(defaultBatchedTokens, c.MaxNumSeqs)
	}
	if c.MaxNumBatchedTokens < c.MaxNumSeqs {
		// vLLM refuses the same: every running sequence needs its decode
		// token in each step.
		bad("--max-num-batched-tokens %d is below --max-num-seqs %d; every running request needs one token per step", c.MaxNumBatchedTokens, c.MaxNumSeqs)
	}
	if c.DecodeKnee < 0 {
		bad("--decode-knee %d must not be negative (0 turns the decode slowdown off)", c.DecodeKnee)
	}
	if !slices.Contains(blockSizes, c.BlockSize) {
		bad("--block-size %d is not one of vLLM's block sizes %v", c.BlockSize, blockSizes)
	}
	if c.EmbeddingDim < 1 || c.EmbeddingDim > maxEmbeddingDim {
		bad("--embedding-dim %d must be between 1 and %d", c.EmbeddingDim, maxEmbeddingDim)
	}
	if c.KVCacheTokens == 0 && c.MaxNumSeqs > 0 && c.MaxModelLen > 0 {
		kv := int64(c.MaxNumSeqs) * int64(c.MaxModelLen)
		c.KVCacheTokens = int(min(kv, math.MaxInt32))
	}
	if c.KVCacheTokens < c.MaxModelLen {
		// vLLM refuses to start in the same case: one full-length request
		// must fit, or it could never be scheduled.
		bad("--kv-cache-tokens %d is below --max-model-len %d; one full-length request must fit", c.KVCacheTokens, c.MaxModelLen)
	} else if c.BlockSize > 0 && c.KVCacheTokens/c.BlockSize*c.BlockSize < c.MaxModelLen {
		bad("--kv-cache-tokens %d holds %d whole blocks of %d tokens, fewer than --max-model-len %d needs",
			c.KVCacheTokens, c.KVCacheTokens/c.BlockSize, c.BlockSize, c.MaxModelLen)
	}
	return errors.Join(errs...)
}

// ParseArgs reads the command line: vLLM's flag names, and, as in
// `vllm serve MODEL`, an optional leading "serve" and a leading positional
// model. It returns the validated config; flag.ErrHelp for -h.
func ParseArgs(args []string, output io.Writer) (Config, error) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("enginesim", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		fmt.Fprintln(output, "usage: enginesim [serve] [MODEL] [flags]   (manual: docs/enginesim.md)")
		fs.PrintDefaults()
	}
	c.RegisterFlags(fs)
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	positional := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		positional, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q; flags go after the model (enginesim [serve] [MODEL] --flag value ...)", fs.Arg(0))
	}
	if positional != "" {
		modelSet := false
		fs.Visit(func(f *flag.Flag) { modelSet = modelSet || f.Name == "model" })
		if modelSet {
			return c, fmt.Errorf("the model is given twice, as %q and --model %q; give it once", positional, c.Model)
		}
		c.Model = positional
	}
	return c, c.Validate()
}
