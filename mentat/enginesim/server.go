// Package enginesim is a vLLM-compatible OpenAI server that needs no GPU:
// it queues, times and counts requests the way vLLM does and generates
// deterministic text, for the router's tests, the demo and load tests.
package enginesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/internal/version"
)

// maxBodyBytes bounds a request body; multi-megabyte prompts are normal.
const maxBodyBytes = 64 << 20

// Engine is one simulated vLLM engine. Build it with New, serve it with Run
// or Serve.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	sched   *scheduler
	lat     *latency
	fail    *failer
	stats   *stats
	samples *sampler
	metrics *metrics
	started time.Time
	created int64
	idBase  uint64
	idSeq   atomic.Uint64
	served  map[string]bool
}

// New validates cfg and builds the engine.
func New(cfg Config, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg: cfg,
		log: log,
		sched: newScheduler(schedConfig{
			maxSeqs: cfg.MaxNumSeqs, maxWaiting: cfg.MaxWaiting,
			kvTokens: cfg.KVCacheTokens, blockSize: cfg.BlockSize, caching: cfg.EnablePrefixCaching,
			prefillPerToken: cfg.PrefillPerToken, budget: cfg.MaxNumBatchedTokens,
		}),
		lat:     newLatency(cfg.TTFT, cfg.ITL, cfg.Jitter, cfg.DecodeKnee),
		fail:    newFailer(cfg.FailRate, cfg.Seed),
		stats:   &stats{},
		samples: &sampler{},
		started: time.Now(),
		created: time.Now().Unix(),
		idBase:  rand.Uint64(),
		served:  map[string]bool{},
	}
	for _, n := range cfg.ServedModelNames {
		e.served[n] = true
	}
	e.metrics = newMetrics(cfg.ServedModelNames[0], e.stats, e.sched)
	return e, nil
}

func (e *Engine) newID(prefix string) string {
	return fmt.Sprintf("%s%016x%016x", prefix, e.idBase, e.idSeq.Add(1))
}

// Handler is the OpenAI server: vLLM's paths, FastAPI's 404 and 405
// bodies, and vLLM's API-key check when keys are configured.
func (e *Engine) Handler() http.Handler { return requireKey(e.cfg.APIKeys, e.routes()) }

func (e *Engine) routes() http.Handler {
	routes := map[string]map[string]http.HandlerFunc{
		"/v1/models":           {http.MethodGet: e.handleModels},
		"/v1/chat/completions": {http.MethodPost: e.handleChat},
		"/v1/completions":      {http.MethodPost: e.handleCompletions},
		"/v1/embeddings":       {http.MethodPost: e.handleEmbeddings},
		"/v1/responses":        {http.MethodPost: e.handleResponses},
		"/tokenize":            {http.MethodPost: e.handleTokenize},
		"/detokenize":          {http.MethodPost: e.handleDetokenize},
		"/metrics":             {http.MethodGet: e.metrics.handler().ServeHTTP},
		"/health":              {http.MethodGet: handleHealth},
		"/version":             {http.MethodGet: handleVersion},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methods, ok := routes[r.URL.Path]
		if !ok && strings.HasPrefix(r.URL.Path, "/v1/responses/") && !strings.Contains(r.URL.Path[len("/v1/responses/"):], "/") {
			// vLLM serves GET /v1/responses/{response_id}; any other method
			// on that pattern (e.g. POST /v1/responses/input_tokens) is a 405.
			methods, ok = map[string]http.HandlerFunc{http.MethodGet: e.handleResponseLookup}, true
		}
		if !ok {
			writeDetail(w, http.StatusNotFound, "Not Found")
			return
		}
		h, ok := methods[r.Method]
		if !ok && r.Method == http.MethodHead {
			h, ok = methods[http.MethodGet]
		}
		if !ok {
			allow := make([]string, 0, len(methods))
			for m := range methods {
				allow = append(allow, m)
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		h(w, r)
	})
}

func handleHealth(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

func handleVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": version.String("enginesim")})
}

func (e *Engine) handleResponseLookup(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/responses/")
	writeError(w, &apiError{Code: http.StatusNotFound, Type: "NotFoundError",
		Message: fmt.Sprintf("Response with id '%s' not found. enginesim does not store responses.", id)})
}

// modelCard is one /v1/models entry, field for field as vLLM's ModelCard.
type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen int               `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"`
}

type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

func (e *Engine) handleModels(w http.ResponseWriter, _ *http.Request) {
	data := make([]modelCard, 0, len(e.cfg.ServedModelNames))
	for i, name := range e.cfg.ServedModelNames {
		data = append(data, modelCard{
			ID: name, Object: "model", Created: e.created, OwnedBy: "vllm",
			Root: e.cfg.Model, MaxModelLen: e.cfg.MaxModelLen,
			Permission: []modelPermission{{
				ID: fmt.Sprintf("modelperm-%016x%04x", e.idBase, i), Object: "model_permission", Created: e.created,
				AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
			}},
		})
	}
	writeJSON(w, http.StatusOK, struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{"list", data})
}

// resolveModel checks a request's "model". vLLM serves an absent model
// with the first served name.
func (e *Engine) resolveModel(name string) (string, error) {
	if name == "" {
		return e.cfg.ServedModelNames[0], nil
	}
	if !e.served[name] {
		return "", modelNotFound(name)
	}
	return name, nil
}

// decodeBody reads a JSON request body into v, bounded by maxBodyBytes.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{Code: http.StatusRequestEntityTooLarge, Type: "BadRequestError",
				Message: fmt.Sprintf("request body is larger than %d bytes; send a shorter prompt", int64(maxBodyBytes))}
		}
		return badRequest("could not read the request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return badRequest("the request body is empty; send a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badRequest("1 validation error: %s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return badRequest("JSON decode error: %v", err)
	}
	return nil
}

// checkContext applies vLLM's context-length rules and returns the
// max_tokens to use (requested, or what is left of the context).
func (e *Engine) checkContext(promptTokens int, maxTokens *int, defaultMax int) (int, error) {
	mml := e.cfg.MaxModelLen
	if promptTokens >= mml {
		return 0, badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
			"Please reduce the length of the input messages.", mml, promptTokens)
	}
	if maxTokens == nil {
		if defaultMax > 0 {
			return min(defaultMax, mml-promptTokens), nil
		}
		return mml - promptTokens, nil
	}
	if *maxTokens < 1 {
		return 0, badRequest("max_tokens must be at least 1, got %d.", *maxTokens)
	}
	if promptTokens+*maxTokens > mml {
		return 0, badRequest("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d "+
			"tokens and your request has %d input tokens (%d > %d - %d).", *maxTokens, mml, promptTokens, *maxTokens, mml, promptTokens)
	}
	return *maxTokens, nil
}

// admit runs the steps every generation request shares after validation:
// the injected failure, then a place in the queue.
func (e *Engine) admit(seq kvSeq) (*ticket, error) {
	if e.fail.fail() {
		e.stats.injectedFailures.Add(1)
		return nil, errInjected
	}
	e.stats.requests.Add(1)
	t, err := e.sched.enqueue(seq)
	if err != nil {
		e.stats.queueFull.Add(1)
		return nil, err
	}
	return t, nil
}
