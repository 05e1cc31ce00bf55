// Package streams measures what an open stream costs the router: many
// concurrent SSE streams held idle through the real mentatd-serve (the
// engine sends a first frame, then nothing for minutes), with the
// router's resident memory read from /proc before and after; then the
// same through the net/http floor, to show what the library alone holds.
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
	"github.com/fe64bb06/frontdoor/bench/internal/floorproc"
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

// Result is the section plus the figures for the summary.
type Result struct {
	Markdown       string
	Opened         int
	BytesPerStream float64
	// FloorOpened and FloorBytesPerStream are the same for the net/http
	// floor (bench/router/floor) in the router's place, measured the same
	// way right after the router.
	FloorOpened         int
	FloorBytesPerStream float64
}

const model = "bench-idle"

// Column names of the table.
const (
	routerCol = "router (`mentatd-serve`, keys on)"
	floorCol  = "net/http floor"
)

// Run starts the cluster and the floor proxy, then for the router and
// then the floor opens the streams, reads the memory and closes them.
// One after the other, not at once: the engine and the client hold one
// descriptor per stream, so both sets together would need twice the
// RLIMIT_NOFILE the stream count is sized for.
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
			capNote = fmt.Sprintf(" Lowered from %d: each proxy holds two descriptors per stream (client and engine side) and "+
				"RLIMIT_NOFILE is %d here, a hard limit this sandbox cannot raise (no CAP_SYS_RESOURCE). Where the harness can raise it "+
				"to 65536, the full %d run.", want, cfg.NoFile, want)
		}
	}
	// The router runs with keys on (issue 27 sets the target so): every
	// stream carries a key and holds its grant while it is open.
	keyFile, secret, err := cluster.WriteKeyFile(cfg.WorkDir)
	if err != nil {
		return Result{}, err
	}
	auth := map[string]string{"Authorization": "Bearer " + secret}
	cl, err := cluster.Start(ctx, cluster.Opts{BinDir: cfg.BinDir, LogDir: cfg.WorkDir, CPUs: cfg.ServerCPUs, RouterHeader: http.Header{"Authorization": {auth["Authorization"]}},
		Engines: []cluster.Engine{{Group: "idle", Model: model, Flags: []string{"--ttft", "10ms", "--itl", "10m", "--jitter", "0", "--prefill-per-token", "0",
			"--max-num-seqs", strconv.Itoa(cfg.N + 100), "--max-waiting", "1000", "--shutdown-timeout", "1s"}}},
		// Every stream holds a client connection: lift SERVE_MAX_CONNECTIONS
		// (4096 by default) so all cfg.N streams open.
		RouterEnv: []string{"SERVE_MAX_CONNECTIONS=0", "SERVE_KEYS_FILE=" + keyFile}})
	if err != nil {
		return Result{}, fmt.Errorf("cluster: %w", err)
	}
	defer cl.Stop()
	fl, err := floorproc.Start(ctx, cfg.Self, cfg.WorkDir, "floor-proxy", cfg.ServerCPUs, map[string]int{"idle": cl.EnginePort["idle"]})
	if err != nil {
		return Result{}, fmt.Errorf("net/http floor: %w", err)
	}
	defer fl.Proc.Stop()
	body := []byte(`{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	const chat = "/v1/chat/completions"
	enginePID := cl.EnginePID("idle")

	rt, err := measure(ctx, cfg, cl.RouterURL+chat, body, auth, cl.Router.PID(), cl.RouterURL, enginePID)
	if err != nil {
		return Result{}, fmt.Errorf("router: %w", err)
	}
	// The engine drops the router's streams when their connections close;
	// give it the same settle time before the floor's warm-up.
	time.Sleep(cfg.Settle)
	ft, err := measure(ctx, cfg, fl.URL("idle")+chat, body, nil, fl.Proc.PID(), "", enginePID)
	if err != nil {
		return Result{}, fmt.Errorf("net/http floor: %w", err)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%d concurrent SSE streams through `mentatd-serve` with keys on (`SERVE_KEYS_FILE`, one key, every stream authenticated and counted) to enginesim (`--ttft 10ms --itl 10m`: each stream gets its first frame, "+
		"then stays open and silent), then the same through the net/http floor (`bench/router/floor`: net/http's server and one "+
		"http.Transport RoundTrip per request, with the router's buffer sizes: 1 KiB Transport buffers, a 512 B relay buffer for an event "+
		"stream; no routing, metrics or limits), pinned like the router, to the same engine. The client (`sse-client idle`, raw TCP, "+
		"pinned like wrk) opens %d at a time and reads each up to its first frame; memory is each proxy's VmRSS from /proc/<pid>/status, "+
		"%s after a warm-up of 100 streams and %s after the last stream opened. The router's streams are closed before the floor's "+
		"warm-up, so the two never hold streams at once.%s\n\n",
		cfg.N, 128, cfg.Settle, cfg.Settle, capNote)
	noMetrics := "— (no /metrics)"
	rows := [][]string{
		{"streams open", fmt.Sprintf("%d of %d (%d failed)", rt.r.Opened, cfg.N, rt.r.Errors), fmt.Sprintf("%d of %d (%d failed)", ft.r.Opened, cfg.N, ft.r.Errors)},
		{"time to open them", rt.r.OpenTime.Round(time.Millisecond).String(), ft.r.OpenTime.Round(time.Millisecond).String()},
		{"proxy RSS before", harness.Bytes(float64(rt.before.rss)), harness.Bytes(float64(ft.before.rss))},
		{"proxy RSS with the streams open", harness.Bytes(float64(rt.after.rss)), harness.Bytes(float64(ft.after.rss))},
		{"**proxy memory per open stream**", fmt.Sprintf("**%s** (%.0f B)", harness.Bytes(rt.per), rt.per), fmt.Sprintf("**%s** (%.0f B)", harness.Bytes(ft.per), ft.per)},
		{"proxy goroutines before / after", fmt.Sprintf("%s / %s", rt.before.m.show("go_goroutines", false), rt.after.m.show("go_goroutines", false)), noMetrics},
		{"of it, goroutine stacks per stream", rt.after.m.perStream(rt.before.m, "go_memstats_stack_inuse_bytes", rt.r.Opened), noMetrics},
		{"of it, heap objects per stream (live and not yet collected)", rt.after.m.perStream(rt.before.m, "go_memstats_heap_alloc_bytes", rt.r.Opened), noMetrics},
		{"engine (enginesim) RSS before / after", fmt.Sprintf("%s / %s", harness.Bytes(float64(rt.before.engine)), harness.Bytes(float64(rt.after.engine))),
			fmt.Sprintf("%s / %s", harness.Bytes(float64(ft.before.engine)), harness.Bytes(float64(ft.after.engine)))},
	}
	if rt.r.FirstError != "" || ft.r.FirstError != "" {
		quote := func(s string) string {
			if s == "" {
				return ""
			}
			return "`" + s + "`"
		}
		rows = append(rows, []string{"first error", quote(rt.r.FirstError), quote(ft.r.FirstError)})
	}
	b.WriteString(harness.Table([]string{"", routerCol, floorCol}, rows, false))
	b.WriteString("\nWhat a stream costs: four goroutines (net/http's server: the connection's and its background reader; " +
		"net/http's Transport: the upstream connection's read and write loops) and their stacks; net/http's server buffers " +
		"(4 KiB read, 4 KiB write, 2 KiB for chunking, fixed by net/http); the Transport's read and write buffers " +
		"(`httpx.TransportReadBufSize`, `TransportWriteBufSize`: 1 KiB each); the relay buffer, `httpx.EventBufSize` (512 B) " +
		"for an event stream; and the request's and answer's headers, contexts and connection state. The request body's " +
		"buffer is back in its pool once the answer's head is in. Stacks and heap come from the router's /metrics; the " +
		"rest of the RSS is the runtime's own bookkeeping. Kernel socket buffers are not in RSS and not counted. " +
		"Target (issue 17): at most 40 KiB.\n\n")
	b.WriteString(FloorNote(rt.per, ft.per, rt.r.Opened > 0, ft.r.Opened > 0) + "\n\n")
	b.WriteString("Command of the floor proxy:\n\n```\n" + fl.Command + "   # this benchmark's own binary (go build ./bench/report) run as `floor-proxy`\n```\n")
	return Result{Markdown: b.String(), Opened: rt.r.Opened, BytesPerStream: rt.per, FloorOpened: ft.r.Opened, FloorBytesPerStream: ft.per}, nil
}

// target is issue 17's goal for memory per idle stream.
const target = 40 << 10

// FloorNote says what the floor's figure means for the router's: how
// much of the router's memory per stream the library alone costs, and
// whether the library leaves room for the target. "" when either run
// opened no stream.
func FloorNote(router, floor float64, routerOK, floorOK bool) string {
	if !routerOK || !floorOK {
		return ""
	}
	s := fmt.Sprintf("What limits the figure: the net/http floor holds %s per idle stream, the router %s", harness.Bytes(floor), harness.Bytes(router))
	switch d := router - floor; {
	case d > 0.05*floor:
		s += fmt.Sprintf(", %s (%.0f%%) of its own on top of the library. ", harness.Bytes(d), 100*d/floor)
	case d < -0.05*floor:
		s += fmt.Sprintf(", %s less than this plain use of the library. ", harness.Bytes(-d))
	default:
		s += ", within 5% of the library's own cost. "
	}
	if floor > target {
		return s + "Used plainly, with the router's buffer sizes, net/http's server and Transport already hold more than 40 KiB per " +
			"stream here, so the target needs the library's own per-stream state to shrink, not only the router's."
	}
	return s + "The library leaves room for 40 KiB; what the router holds beyond that is its own."
}

// run is one proxy's measurement.
type run struct {
	before, after reading
	r             sse.IdleResult
	per           float64
}

// reading is what is read before and after the streams open: the
// proxy's RSS, its /metrics gauges (nil without a metrics URL) and the
// engine's RSS.
type reading struct {
	rss, engine int64
	m           metrics
}

func read(pid int, metricsURL string, enginePID int) (reading, error) {
	rss, err := harness.RSSOf(pid)
	if err != nil {
		return reading{}, err
	}
	rd := reading{rss: rss}
	if metricsURL != "" {
		rd.m = scrape(metricsURL)
	}
	rd.engine, _ = harness.RSSOf(enginePID)
	return rd, nil
}

// measure holds cfg.N idle streams through url and returns the RSS
// growth of pid per stream. Warm-up first: a few streams opened and
// closed, so the reading before includes the proxy's steady-state heap,
// pools and first-request allocations rather than charging them to the
// streams.
func measure(ctx context.Context, cfg Config, url string, body []byte, header map[string]string, pid int, metricsURL string, enginePID int) (run, error) {
	warm, err := sse.OpenIdle(ctx, cfg.Self, cfg.LoadCPUs, sse.IdleOpts{URL: url, Body: body, Header: header, N: 100, Hold: time.Minute})
	if err != nil {
		return run{}, fmt.Errorf("warm-up: %w", err)
	}
	if err := warm.Close(); err != nil {
		return run{}, err
	}
	time.Sleep(cfg.Settle)
	var m run
	if m.before, err = read(pid, metricsURL, enginePID); err != nil {
		return run{}, err
	}
	idle, err := sse.OpenIdle(ctx, cfg.Self, cfg.LoadCPUs, sse.IdleOpts{URL: url, Body: body, Header: header, N: cfg.N, Parallel: 128,
		OpenTimeout: 120 * time.Second, Hold: 3 * time.Minute})
	if err != nil {
		return run{}, err
	}
	time.Sleep(cfg.Settle)
	m.after, err = read(pid, metricsURL, enginePID)
	if cerr := idle.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return run{}, err
	}
	m.r = idle.Result
	if m.r.Opened == 0 {
		return run{}, fmt.Errorf("no stream opened: %s", m.r.FirstError)
	}
	m.per = float64(m.after.rss-m.before.rss) / float64(m.r.Opened)
	return m, nil
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
