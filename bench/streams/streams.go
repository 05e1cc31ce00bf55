// Package streams measures what an open stream costs the router: many
// concurrent SSE streams held idle through the real mentatd-serve (the
// engine sends a first frame, then nothing for minutes), with the
// router's resident memory read from /proc before and after.
package streams

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/cluster"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/sse"
)

// Config is one run. Zero values take the defaults in the comments.
type Config struct {
	// BinDir holds the binaries; Self is this benchmark's executable (the
	// client runs as a child of it); WorkDir receives logs.
	BinDir, Self, WorkDir string
	ServerCPUs, LoadCPUs  string
	// N is how many streams to hold (default 10,000). It is lowered to
	// what NoFile allows: the router holds two descriptors per stream.
	N int
	// NoFile is the RLIMIT_NOFILE the processes inherit (0 = unknown,
	// no cap).
	NoFile uint64
	// Settle is the wait between the last stream opening and the memory
	// reading (default 2 s).
	Settle time.Duration
}

// Result is the section plus the figure for the summary.
type Result struct {
	Markdown       string
	Opened         int
	BytesPerStream float64
}

const model = "bench-idle"

// Run starts the cluster, opens the streams, reads the memory, closes
// them.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.N <= 0 {
		cfg.N = 10000
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 2 * time.Second
	}
	want := cfg.N
	capNote := ""
	if cfg.NoFile > 0 {
		if limit := int(cfg.NoFile-200) / 2; cfg.N > limit {
			cfg.N = limit
			capNote = fmt.Sprintf(" Lowered from %d: the router holds two descriptors per stream (client and engine side) and "+
				"RLIMIT_NOFILE is %d here, a hard limit this sandbox cannot raise (no CAP_SYS_RESOURCE). Where the harness can raise it "+
				"to 65536, the full %d run.", want, cfg.NoFile, want)
		}
	}
	cl, err := cluster.Start(ctx, cluster.Opts{BinDir: cfg.BinDir, LogDir: cfg.WorkDir, CPUs: cfg.ServerCPUs,
		Engines: []cluster.Engine{{Group: "idle", Model: model, Flags: []string{"--ttft", "10ms", "--itl", "10m", "--jitter", "0", "--prefill-per-token", "0",
			"--max-num-seqs", strconv.Itoa(cfg.N + 100), "--max-waiting", "1000", "--shutdown-timeout", "1s"}}},
		// Every stream holds a client connection: lift SERVE_MAX_CONNECTIONS
		// (4096 by default) so all cfg.N streams open.
		RouterEnv: []string{"SERVE_MAX_CONNECTIONS=0"}})
	if err != nil {
		return Result{}, fmt.Errorf("cluster: %w", err)
	}
	defer cl.Stop()
	body := []byte(`{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	url := cl.RouterURL + "/v1/chat/completions"

	// Warm up: a few streams opened and closed, so the reading before
	// includes the router's steady-state heap, pools and first-request
	// allocations rather than charging them to the streams.
	warm, err := sse.OpenIdle(ctx, cfg.Self, cfg.LoadCPUs, sse.IdleOpts{URL: url, Body: body, N: 100, Hold: time.Minute})
	if err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}
	if err := warm.Close(); err != nil {
		return Result{}, err
	}
	time.Sleep(cfg.Settle)
	before, err := cl.Router.RSS()
	if err != nil {
		return Result{}, err
	}
	mBefore := scrape(cl.RouterURL)
	enginePID := cl.EnginePID("idle")
	eBefore, _ := harness.RSSOf(enginePID)

	idle, err := sse.OpenIdle(ctx, cfg.Self, cfg.LoadCPUs, sse.IdleOpts{URL: url, Body: body, N: cfg.N, Parallel: 128,
		OpenTimeout: 120 * time.Second, Hold: 3 * time.Minute})
	if err != nil {
		return Result{}, err
	}
	time.Sleep(cfg.Settle)
	after, err := cl.Router.RSS()
	mAfter := scrape(cl.RouterURL)
	eAfter, _ := harness.RSSOf(enginePID)
	if cerr := idle.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Result{}, err
	}
	r := idle.Result
	if r.Opened == 0 {
		return Result{}, fmt.Errorf("no stream opened: %s", r.FirstError)
	}
	per := float64(after-before) / float64(r.Opened)

	var b strings.Builder
	fmt.Fprintf(&b, "%d concurrent SSE streams through `mentatd-serve` to enginesim (`--ttft 10ms --itl 10m`: each stream gets its first frame, "+
		"then stays open and silent). The client (`sse-client idle`, raw TCP, pinned like wrk) opens %d at a time and reads each up to its first frame; "+
		"memory is the router's VmRSS from /proc/<pid>/status, %s after a warm-up of 100 streams and %s after the last stream opened.%s\n\n",
		cfg.N, 128, cfg.Settle, cfg.Settle, capNote)
	rows := [][]string{
		{"streams open", fmt.Sprintf("%d of %d (%d failed)", r.Opened, cfg.N, r.Errors)},
		{"time to open them", r.OpenTime.Round(time.Millisecond).String()},
		{"router RSS before", harness.Bytes(float64(before))},
		{"router RSS with the streams open", harness.Bytes(float64(after))},
		{"**router memory per open stream**", fmt.Sprintf("**%s** (%.0f B)", harness.Bytes(per), per)},
		{"router goroutines before / after", fmt.Sprintf("%s / %s", mBefore.show("go_goroutines", false), mAfter.show("go_goroutines", false))},
		{"of it, goroutine stacks per stream", mAfter.perStream(mBefore, "go_memstats_stack_inuse_bytes", r.Opened)},
		{"of it, heap objects per stream (live and not yet collected)", mAfter.perStream(mBefore, "go_memstats_heap_alloc_bytes", r.Opened)},
		{"engine (enginesim) RSS before / after", fmt.Sprintf("%s / %s", harness.Bytes(float64(eBefore)), harness.Bytes(float64(eAfter)))},
	}
	if r.FirstError != "" {
		rows = append(rows, []string{"first error", "`" + r.FirstError + "`"})
	}
	b.WriteString(harness.Table([]string{"", ""}, rows, false))
	b.WriteString("\nWhat a stream costs: four goroutines (net/http's server: the connection's and its background reader; " +
		"net/http's Transport: the upstream connection's read and write loops) and their stacks; net/http's server buffers " +
		"(4 KiB read, 4 KiB write, 2 KiB for chunking, fixed by net/http); the Transport's read and write buffers " +
		"(`httpx.TransportReadBufSize`, `TransportWriteBufSize`: 1 KiB each); the relay buffer, `httpx.EventBufSize` (512 B) " +
		"for an event stream; and the request's and answer's headers, contexts and connection state. The request body's " +
		"buffer is back in its pool once the answer's head is in. Stacks and heap come from the router's /metrics; the " +
		"rest of the RSS is the runtime's own bookkeeping. Kernel socket buffers are not in RSS and not counted. " +
		"Target (issue 17): at most 40 KiB.\n")
	return Result{Markdown: b.String(), Opened: r.Opened, BytesPerStream: per}, nil
}

// metrics is the router's Go runtime gauges from /metrics, nil when it
// could not be read.
type metrics map[string]float64

// scrape reads the go_ gauges of the router's /metrics.
func scrape(base string) metrics {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "go_") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			m[name] = f
		}
	}
	return m
}

// show is one gauge, "?" when missing.
func (m metrics) show(name string, bytes bool) string {
	v, ok := m[name]
	switch {
	case !ok:
		return "?"
	case bytes:
		return harness.Bytes(v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// perStream is a gauge's growth from before to m over n streams.
func (m metrics) perStream(before metrics, name string, n int) string {
	a, okA := m[name]
	b, okB := before[name]
	if !okA || !okB || n == 0 {
		return "?"
	}
	return fmt.Sprintf("%s (%s before, %s after)", harness.Bytes((a-b)/float64(n)), harness.Bytes(b), harness.Bytes(a))
}
