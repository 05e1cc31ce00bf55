// Package enginesim measures the simulator itself, so that a routing
// benchmark on two cores can tell how much of a core its engines take: the
// requests per second one enginesim answers per CPU second with prefix
// caching on (and off, for the cost of the cache), and the streams it keeps
// on time per core.
package enginesim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/sse"
	"github.com/fe64bb06/frontdoor/bench/internal/wrk"
)

// Config is one run.
type Config struct {
	// BinDir holds enginesim; Self is the benchmark executable (the stream
	// client runs as a child of it); WorkDir receives logs and wrk files.
	BinDir, Self, WorkDir string
	ServerCPUs, LoadCPUs  string
	// Duration of each measurement (default 5 s).
	Duration time.Duration
	// Streams is how many concurrent streams the stream measurement holds
	// (default 1,000).
	Streams int
}

// Result is the section plus the figures for the summary.
type Result struct {
	Markdown string
	// RPSPerCore is requests per engine CPU second with prefix caching on;
	// StreamsPerCore the concurrent on-time streams per engine core.
	RPSPerCore, StreamsPerCore float64
}

const (
	model = "bench-sim"
	// systemWords is the shared system prompt's length: about 1,000 tokens
	// that every request tokenizes, hashes and finds in the cache.
	systemWords = 1000
	streamITL   = 20 * time.Millisecond
	streamToks  = 100
)

func body(stream bool, maxTokens int) []byte {
	vocab := []string{"the", "of", "and", "to", "in", "is", "that", "for"}
	var sys strings.Builder
	for i := range systemWords {
		if i > 0 {
			sys.WriteByte(' ')
		}
		sys.WriteString(vocab[i%len(vocab)])
	}
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream, "max_tokens": maxTokens, "ignore_eos": true,
		"messages": []map[string]any{{"role": "system", "content": sys.String()}, {"role": "user", "content": "What is a queue?"}}})
	return b
}

// engine starts one enginesim pinned to the server CPUs.
func engine(ctx context.Context, cfg Config, name string, flags ...string) (*harness.Proc, string, error) {
	port, err := harness.FreePort()
	if err != nil {
		return nil, "", err
	}
	args := append([]string{"--model", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--jitter", "0",
		"--max-num-seqs", "4096", "--max-waiting", "100000", "--shutdown-timeout", "1s"}, flags...)
	p, err := harness.Start(cfg.WorkDir, harness.Spec{Name: name, Bin: cfg.BinDir + "/enginesim", Args: args, CPUs: cfg.ServerCPUs})
	if err != nil {
		return nil, "", err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	err = harness.Eventually(ctx, 20*time.Second, name+" /health", func() error {
		res, err := http.Get(url + "/health")
		if err != nil {
			return err
		}
		res.Body.Close()
		return nil
	}, p)
	if err != nil {
		p.Stop()
		return nil, "", err
	}
	return p, url, nil
}

// cpuDuring runs f and returns the CPU time p used meanwhile.
func cpuDuring(p *harness.Proc, f func() error) (time.Duration, error) {
	before, err := harness.CPUTime(p.PID())
	if err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	after, err := harness.CPUTime(p.PID())
	return after - before, err
}

type rpsRow struct {
	name       string
	prompt     int // prompt tokens of each request, from /tokenize
	res        wrk.Result
	cpu        time.Duration
	perCoreRPS float64
}

// rps measures answers per second at full speed (no simulated time), and
// per CPU second of the engine.
func rps(ctx context.Context, cfg Config, name string, flags ...string) (rpsRow, error) {
	p, url, err := engine(ctx, cfg, name, append([]string{"--ttft", "0", "--itl", "0", "--prefill-per-token", "0"}, flags...)...)
	if err != nil {
		return rpsRow{}, err
	}
	defer p.Stop()
	prompt, err := promptTokens(url)
	if err != nil {
		return rpsRow{}, err
	}
	var res wrk.Result
	cpu, err := cpuDuring(p, func() error {
		var err error
		res, err = wrk.Run(ctx, cfg.WorkDir, wrk.Opts{URL: url + "/v1/chat/completions", Body: body(false, 16), Threads: 1, Conns: 64,
			Duration: cfg.Duration, CPUs: cfg.LoadCPUs, Name: name})
		return err
	})
	if err != nil {
		return rpsRow{}, err
	}
	if res.Errors > 0 || res.Status > 0 {
		return rpsRow{}, fmt.Errorf("%s: %d socket errors, %d non-2xx answers", name, res.Errors, res.Status)
	}
	row := rpsRow{name: name, prompt: prompt, res: res, cpu: cpu}
	if cpu > 0 {
		row.perCoreRPS = float64(res.Requests) / cpu.Seconds()
	}
	return row, nil
}

// promptTokens asks the engine how many tokens the requests' prompt has.
func promptTokens(url string) (int, error) {
	var req map[string]any
	_ = json.Unmarshal(body(false, 1), &req)
	b, _ := json.Marshal(map[string]any{"model": model, "messages": req["messages"]})
	res, err := http.Post(url+"/tokenize", "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var out struct {
		Count int `json:"count"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/tokenize: %s %v", res.Status, err)
	}
	return out.Count, nil
}

// Run measures both and writes the section.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Streams <= 0 {
		cfg.Streams = 1000
	}
	on, err := rps(ctx, cfg, "enginesim-cache-on")
	if err != nil {
		return Result{}, err
	}
	off, err := rps(ctx, cfg, "enginesim-cache-off", "--no-enable-prefix-caching")
	if err != nil {
		return Result{}, err
	}

	// Streams: realistic timing, prefix caching on, no decode slowdown so
	// that the ITL the client sees is the simulator's own accuracy.
	p, url, err := engine(ctx, cfg, "enginesim-streams", "--ttft", "10ms", "--itl", streamITL.String(), "--decode-knee", "0")
	if err != nil {
		return Result{}, err
	}
	defer p.Stop()
	var sr sse.StreamResult
	wall := time.Now()
	cpu, err := cpuDuring(p, func() error {
		var err error
		sr, err = sse.RunStreams(ctx, cfg.Self, cfg.LoadCPUs, sse.StreamOpts{URL: url + "/v1/chat/completions", Body: body(true, streamToks),
			Concurrency: cfg.Streams, Count: 4 * cfg.Streams, Duration: cfg.Duration})
		return err
	})
	elapsed := time.Since(wall)
	if err != nil {
		return Result{}, err
	}
	if sr.Streams == 0 {
		return Result{}, fmt.Errorf("no stream completed: %s", sr.FirstError)
	}
	cores := cpu.Seconds() / elapsed.Seconds()
	res := Result{RPSPerCore: on.perCoreRPS}
	if cores > 0 {
		res.StreamsPerCore = float64(cfg.Streams) / cores
	}

	var b strings.Builder
	fmt.Fprintf(&b, "One enginesim (pinned to CPU %s) serving chat completions whose prompt is a %d-word shared system prompt plus a "+
		"question (%d prompt tokens to tokenize, hash into 16-token blocks and look up per request). Engine CPU time is read from "+
		"/proc/<pid>/stat (10 ms ticks) before and after each load.\n\n", orAny(cfg.ServerCPUs), systemWords, on.prompt)
	b.WriteString("**Requests per second**, no simulated time (`--ttft 0 --itl 0 --prefill-per-token 0`), 16 tokens per answer, " +
		"wrk with 64 connections:\n\n")
	rows := [][]string{}
	for _, r := range []rpsRow{on, off} {
		rows = append(rows, []string{r.name, fmt.Sprintf("%.0f", r.res.RPS()), harness.Ms(r.res.P50), harness.Ms(r.res.P99),
			fmt.Sprintf("%.2f", r.cpu.Seconds()/r.res.Duration.Seconds()), fmt.Sprintf("**%.0f**", r.perCoreRPS)})
	}
	b.WriteString(harness.Table([]string{"engine", "req/s", "p50 ms", "p99 ms", "engine cores busy", "req/s per engine core"}, rows, true))
	fmt.Fprintf(&b, "\n```\n%s\n```\n\n", on.res.Command)
	fmt.Fprintf(&b, "**Concurrent streams**: %d streams at once (`--ttft 10ms --itl %s --decode-knee 0`, %d tokens each, prefix "+
		"caching on), %d started within %s, read by the pinned `sse-client streams`:\n\n", cfg.Streams, streamITL, streamToks, 4*cfg.Streams, cfg.Duration)
	b.WriteString(harness.Table([]string{"", ""}, [][]string{
		{"streams completed (errors)", fmt.Sprintf("%d (%d)", sr.Streams, sr.Errors)},
		{"time to first frame p50 / p99", fmt.Sprintf("%s / %s ms", harness.Ms(sr.TTFF50), harness.Ms(sr.TTFF99))},
		{"gap between frames p50 / p99 (engine: " + streamITL.String() + ")", fmt.Sprintf("%s / %s ms", harness.Ms(sr.Gap50), harness.Ms(sr.Gap99))},
		{"engine cores busy", fmt.Sprintf("%.2f", cores)},
		{"**streams per engine core**", fmt.Sprintf("**%.0f**", res.StreamsPerCore)},
	}, false))
	b.WriteString("\nA routing benchmark on two cores should give its engines well under these rates, so that what it measures is " +
		"the router. No target was set in the issues.\n")
	if sr.FirstError != "" {
		fmt.Fprintf(&b, "\nFirst stream error: `%s`\n", sr.FirstError)
	}
	res.Markdown = b.String()
	return res, nil
}

func orAny(cpus string) string {
	if cpus == "" {
		return "any (not pinned)"
	}
	return cpus
}
