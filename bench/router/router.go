// Package router measures mentatd-serve beside Nginx and beside calling
// the engine directly, on loopback, in one run: small non-streaming chat
// requests, 1 MiB bodies, and streams (time to first frame, inter-frame
// delay). The router is the real binary, routing by model through real
// discovery (mentatd daemon + agent + enginesim). Beside it runs the
// net/http floor (package floor): a proxy made of net/http's server and one
// http.Transport RoundTrip and nothing else, what the library costs used
// plainly, without the router's own work.
package router

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/cluster"
	"github.com/fe64bb06/frontdoor/bench/internal/compare"
	"github.com/fe64bb06/frontdoor/bench/internal/floorproc"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/nginx"
	"github.com/fe64bb06/frontdoor/bench/internal/sse"
	"github.com/fe64bb06/frontdoor/bench/internal/wrk"
)

// Config is one run. Zero values take the defaults in the comments.
type Config struct {
	// BinDir holds the binaries (make build); Self is this benchmark's
	// own executable (the streaming client runs as a child of it).
	BinDir, Self string
	// WorkDir receives configs and logs.
	WorkDir string
	// ServerCPUs pins engines and proxies, LoadCPUs the load generators
	// ("" = no pin).
	ServerCPUs, LoadCPUs string
	// Duration of each measurement (default 5 s); Rounds is how often
	// every measurement is repeated, paths interleaved (default 1; the
	// median is reported).
	Duration time.Duration
	Rounds   int
	// Conns is wrk's connections for the throughput runs (default 32).
	Conns int
	// MaxRequests bounds each wrk run (default 2,000,000).
	MaxRequests int
	// StreamConcurrency is how many streams run at once (default 32).
	StreamConcurrency int
}

func (c Config) withDefaults() Config {
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.Rounds <= 0 {
		c.Rounds = 1
	}
	if c.Conns <= 0 {
		c.Conns = 32
	}
	if c.MaxRequests <= 0 {
		c.MaxRequests = 2_000_000
	}
	if c.StreamConcurrency <= 0 {
		c.StreamConcurrency = 32
	}
	return c
}

// Engine settings of the two groups.
const (
	fastModel   = "bench-fast"
	streamModel = "bench-stream"
	streamTTFT  = 50 * time.Millisecond
	streamITL   = 10 * time.Millisecond
	streamToks  = 20
)

// floorPath names the net/http floor in the tables; keysPath the router
// with SERVE_KEYS_FILE set, every request carrying a key.
const (
	floorPath = "net/http floor"
	keysPath  = "router, keys on"
)

// Paths, in the order every measurement visits them.
var paths = []string{"direct", "nginx", floorPath, "router", keysPath}

// Result is the section of the report plus the figures the summary
// checks against the targets.
type Result struct {
	Markdown string
	// AddedP50 is the router's p50 minus direct's, small requests, one
	// connection; RouterVsNginx the router's throughput over Nginx's.
	AddedP50, NginxAddedP50 time.Duration
	RouterVsNginx           float64
	// RouterCPU and NginxCPU are the proxy's CPU µs per request, small
	// requests at Conns connections; CPUVsNginx their ratio.
	RouterCPU, NginxCPU, CPUVsNginx float64
	// FloorCPU is the net/http floor's CPU µs per request at Conns
	// connections, FloorCPUVsNginx its ratio to Nginx's; FloorAddedP50
	// its p50 minus direct's at one connection.
	FloorCPU, FloorCPUVsNginx float64
	FloorAddedP50             time.Duration
	// BigVsNginx is the router's 1 MiB throughput over Nginx's, the lower
	// of the 1- and 8-connection loads (BigVsNginx1, BigVsNginx8).
	BigVsNginx, BigVsNginx1, BigVsNginx8 float64
	// FloorBigVsNginx1 and FloorBigVsNginx8 are the floor's 1 MiB
	// throughput over Nginx's at 1 and 8 connections.
	FloorBigVsNginx1, FloorBigVsNginx8 float64
	// Streams are the router's stream figures over direct's: TTFF p50 and
	// gap p50 ratios, and frames that arrived coalesced (gap < 1 ms).
	StreamTTFF, StreamGap float64
	StreamCoalesced       int
	// Keys on (issue 27): the keyed router's CPU µs per small request at
	// Conns connections, its added p50 at one connection, and its stream
	// TTFF p50 beside the floor's (both over direct's).
	KeysCPU                         float64
	KeysAddedP50                    time.Duration
	KeysStreamTTFF, FloorStreamTTFF float64
}

// Run starts the cluster and Nginx, measures, stops them.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	cl, err := cluster.Start(ctx, cluster.Opts{BinDir: cfg.BinDir, LogDir: cfg.WorkDir, CPUs: cfg.ServerCPUs,
		Engines: []cluster.Engine{
			{Group: "fast", Model: fastModel, Flags: []string{"--ttft", "0", "--itl", "0", "--jitter", "0", "--prefill-per-token", "0", "--decode-knee", "0", "--max-num-seqs", "1024"}},
			{Group: "stream", Model: streamModel, Flags: []string{"--ttft", streamTTFT.String(), "--itl", streamITL.String(), "--jitter", "0", "--prefill-per-token", "0", "--decode-knee", "0", "--max-num-seqs", "1024"}},
		}})
	if err != nil {
		return Result{}, fmt.Errorf("cluster: %w", err)
	}
	defer cl.Stop()
	ng, err := nginx.Start(ctx, cfg.WorkDir, cfg.ServerCPUs, map[string]int{"fast": cl.EnginePort["fast"], "stream": cl.EnginePort["stream"]})
	if err != nil {
		return Result{}, fmt.Errorf("nginx: %w", err)
	}
	defer ng.Stop()
	fl, err := floorproc.Start(ctx, cfg.Self, cfg.WorkDir, "floor-proxy", cfg.ServerCPUs, map[string]int{"fast": cl.EnginePort["fast"], "stream": cl.EnginePort["stream"]})
	if err != nil {
		return Result{}, fmt.Errorf("net/http floor: %w", err)
	}
	defer fl.Proc.Stop()
	keyFile, secret, err := cluster.WriteKeyFile(cfg.WorkDir)
	if err != nil {
		return Result{}, err
	}
	bearer := "Bearer " + secret
	keyed, keyedURL, err := cl.StartRouter(ctx, "mentatd-serve-keys", []string{"SERVE_KEYS_FILE=" + keyFile}, http.Header{"Authorization": {bearer}})
	if err != nil {
		return Result{}, fmt.Errorf("router with keys: %w", err)
	}
	// headers is a fresh map per call: wrk.Opts fills in its defaults.
	headers := func(path string) map[string]string {
		if path == keysPath {
			return map[string]string{"Authorization": bearer}
		}
		return nil
	}
	// script names each path's wrk script: the keyed one holds the key.
	script := func(load, path string) string {
		if path == keysPath {
			return load + "-keys"
		}
		return load
	}

	base := func(path, group string) string {
		switch path {
		case "direct":
			return cl.EngineURL(group)
		case "nginx":
			return ng.URL(group)
		case floorPath:
			return fl.URL(group)
		case keysPath:
			return keyedURL
		}
		return cl.RouterURL
	}
	const chat = "/v1/chat/completions"
	small := []byte(`{"model":"` + fastModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
	// The padding is a field the engine ignores, placed before "model" as
	// SDKs that serialise messages first do, so the router scans all of it.
	big := []byte(`{"padding":"` + strings.Repeat("x", 1<<20) + `","model":"` + fastModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
	stream := []byte(fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":%d}`, streamModel, streamToks))

	for _, p := range paths {
		if err := check(ctx, base(p, "fast")+chat, small, headers(p)); err != nil {
			return Result{}, fmt.Errorf("%s: %w", p, err)
		}
	}

	type load struct {
		name, file string
		body       []byte
		conns      int
		small      bool
	}
	loads := []load{
		{"small, 1 connection", "small", small, 1, true},
		{fmt.Sprintf("small, %d connections", cfg.Conns), "small", small, cfg.Conns, true},
		{"1 MiB body, 1 connection", "1mib", big, 1, false},
		{"1 MiB body, 8 connections", "1mib", big, 8, false},
	}
	engine := compare.Proc{Label: "engine", PID: cl.EnginePID("fast")}
	fast := map[string]compare.Path{
		"direct":  {Name: "direct", URL: base("direct", "fast") + chat, Procs: []compare.Proc{engine}},
		"nginx":   {Name: "nginx", URL: base("nginx", "fast") + chat, Procs: []compare.Proc{{Label: "proxy", PID: ng.Proc.PID()}, engine}},
		floorPath: {Name: floorPath, URL: base(floorPath, "fast") + chat, Procs: []compare.Proc{{Label: "proxy", PID: fl.Proc.PID()}, engine}},
		"router":  {Name: "router", URL: base("router", "fast") + chat, Procs: []compare.Proc{{Label: "proxy", PID: cl.Router.PID()}, engine}},
		keysPath:  {Name: keysPath, URL: base(keysPath, "fast") + chat, Headers: headers(keysPath), Procs: []compare.Proc{{Label: "proxy", PID: keyed.PID()}, engine}},
	}
	wres := map[string][]compare.Measured{} // load|path → rounds
	sres := map[string][]sse.StreamResult{}
	var commands []string
	for round := range cfg.Rounds {
		for _, l := range loads {
			for _, p := range paths {
				m, err := compare.Run(ctx, cfg.WorkDir, fast[p], wrk.Opts{Body: l.body, Conns: l.conns,
					Duration: cfg.Duration, MaxRequests: cfg.MaxRequests, CPUs: cfg.LoadCPUs, Name: script(l.file, p)})
				if err != nil {
					return Result{}, fmt.Errorf("%s: %w", l.name, err)
				}
				wres[l.name+"|"+p] = append(wres[l.name+"|"+p], m)
				if round == 0 {
					commands = append(commands, fmt.Sprintf("%s   # %s, %s", m.Command, l.name, p))
				}
			}
		}
		for _, p := range paths {
			r, err := sse.RunStreams(ctx, cfg.Self, cfg.LoadCPUs, sse.StreamOpts{URL: base(p, "stream") + chat, Body: stream, Header: headers(p),
				Concurrency: cfg.StreamConcurrency, Count: 100000, Duration: cfg.Duration})
			if err != nil {
				return Result{}, fmt.Errorf("streams via %s: %w", p, err)
			}
			sres[p] = append(sres[p], r)
		}
	}

	var res Result
	var b strings.Builder
	fmt.Fprintf(&b, "Engines: enginesim group `fast` (`--ttft 0 --itl 0 --jitter 0 --prefill-per-token 0 --decode-knee 0`, answers at once) and group `stream` "+
		"(`--ttft %s --itl %s --jitter 0 --prefill-per-token 0 --decode-knee 0`, %d tokens), each started by a `mentatd agent` registered with one `mentatd daemon`; "+
		"the router finds them through the daemon (`%s`). Nginx 1 worker, `proxy_pass` to an `upstream` block with `keepalive 256`, "+
		"HTTP/1.1, `proxy_buffering off` (config below). "+
		"`%s` does only what every proxy on net/http must: net/http's server reads the body into a pooled buffer, one `http.Transport` "+
		"RoundTrip sends it to the same engine (keep-alive, 256 idle connections per engine, no compression, no proxy, the router's 1 KiB "+
		"Transport buffers), and the status, headers and body are copied back through a 32 KiB buffer, event streams through a 512 B one "+
		"flushed per chunk (the router's sizes); no routing, metrics, logging or limits (`bench/router/floor`, "+
		"pinned like the router). This row is what net/http and http.Transport cost used plainly: the router's figure above it is the router's own work. "+
		"%d round(s) of %s per measurement, paths interleaved; medians shown.\n\n",
		streamTTFT, streamITL, streamToks, strings.Join(cl.RouterEnvUsed, " "), floorPath, cfg.Rounds, cfg.Duration)
	b.WriteString("Small request: `" + string(small) + "` (answer ≈ 0.6 KiB). 1 MiB request: the same with 1 MiB of padding in a field the engine ignores, placed before `model`.\n\n")

	for _, l := range loads {
		aggs := map[string]compare.Agg{}
		for _, p := range paths {
			aggs[p] = compare.Aggregate(wres[l.name+"|"+p])
			// A path that answered errors measured something else than
			// serving (a refusal is cheap): its figures would pass any
			// target, so the section fails instead.
			if a := aggs[p]; a.Refused > 0 {
				return Result{}, fmt.Errorf("%s via %s: %d answers were not 2xx, e.g. %s", l.name, p, a.Refused, a.FirstBad)
			}
		}
		fmt.Fprintf(&b, "**%s**\n\n%s\n", l.name, compare.Table(paths, aggs, []string{"proxy", "engine"}))
		d := aggs["direct"]
		if l.small && l.conns == 1 {
			res.AddedP50 = aggs["router"].P50 - d.P50
			res.NginxAddedP50 = aggs["nginx"].P50 - d.P50
			res.FloorAddedP50 = aggs[floorPath].P50 - d.P50
			res.KeysAddedP50 = aggs[keysPath].P50 - d.P50
		}
		if !l.small && aggs["nginx"].RPS > 0 {
			v, fv := aggs["router"].RPS/aggs["nginx"].RPS, aggs[floorPath].RPS/aggs["nginx"].RPS
			if l.conns == 1 {
				res.BigVsNginx1, res.FloorBigVsNginx1 = v, fv
			} else {
				res.BigVsNginx8, res.FloorBigVsNginx8 = v, fv
			}
		}
		if l.small && l.conns > 1 {
			res.RouterVsNginx = aggs["router"].RPS / aggs["nginx"].RPS
			res.RouterCPU, res.NginxCPU = aggs["router"].CPUus["proxy"], aggs["nginx"].CPUus["proxy"]
			res.FloorCPU = aggs[floorPath].CPUus["proxy"]
			res.KeysCPU = aggs[keysPath].CPUus["proxy"]
			if res.NginxCPU > 0 {
				res.CPUVsNginx = res.RouterCPU / res.NginxCPU
				res.FloorCPUVsNginx = res.FloorCPU / res.NginxCPU
			}
			fmt.Fprintf(&b, "What limits throughput here: %s %s %s %s\n\n", compare.Limit("router", aggs["router"], "proxy", "engine", d),
				compare.Limit(floorPath, aggs[floorPath], "proxy", "engine", d),
				compare.Limit("Nginx", aggs["nginx"], "proxy", "engine", d), FloorNote(res.RouterCPU, res.FloorCPU, res.NginxCPU))
		}
	}

	res.BigVsNginx = min(res.BigVsNginx1, res.BigVsNginx8)

	rows := [][]string{}
	sd := medianStreams(sres["direct"])
	for _, p := range paths {
		s := medianStreams(sres[p])
		rows = append(rows, []string{p, fmt.Sprint(s.Streams), fmt.Sprint(s.Errors), harness.Ms(s.TTFF50), harness.Ms(s.TTFF99),
			harness.Ratio(float64(s.TTFF50), float64(sd.TTFF50)), harness.Ms(s.Gap50), harness.Ms(s.Gap99), harness.Ms(s.GapMean),
			harness.Ratio(float64(s.Gap50), float64(sd.Gap50)), fmt.Sprintf("%d / %d", s.Coalesced, s.Gaps), fmt.Sprintf("%d (%d differ)", s.Frames, s.FramesDiffer)})
		if s.FirstError != "" {
			fmt.Fprintf(&b, "First stream error via %s: `%s`\n\n", p, s.FirstError)
		}
		if sd.TTFF50 > 0 {
			switch p {
			case keysPath:
				res.KeysStreamTTFF = float64(s.TTFF50) / float64(sd.TTFF50)
			case floorPath:
				res.FloorStreamTTFF = float64(s.TTFF50) / float64(sd.TTFF50)
			}
		}
		if p == "router" && sd.TTFF50 > 0 && sd.Gap50 > 0 {
			res.StreamTTFF, res.StreamGap = float64(s.TTFF50)/float64(sd.TTFF50), float64(s.Gap50)/float64(sd.Gap50)
			res.StreamCoalesced = s.Coalesced
		}
	}
	fmt.Fprintf(&b, "**streams, %d at once** (the engine sends the first frame after %s, then one every %s; a path that "+
		"preserves timing shows the same TTFF and gaps as direct and no coalesced frames)\n\n%s\n",
		cfg.StreamConcurrency, streamTTFT, streamITL, harness.Table([]string{"path", "streams", "errors", "TTFF p50 ms", "TTFF p99 ms", "TTFF p50 ÷ direct",
			"gap p50 ms", "gap p99 ms", "gap mean ms", "gap p50 ÷ direct", "coalesced (gap < 1 ms)", "frames per stream"}, rows, true))

	b.WriteString(compare.CPUNote + "\n")
	b.WriteString("Commands (the streaming client is this benchmark's own binary run as `sse-client streams`, pinned the same way):\n\n```\n")
	b.WriteString(strings.Join(commands, "\n"))
	b.WriteString("\n" + fl.Command + "   # the net/http floor: this benchmark's own binary (go build ./bench/report) run as `floor-proxy`")
	b.WriteString("\n```\n\n`small.lua` and `1mib.lua` (the body file differs; the budget is the run's request bound per thread):\n\n```lua\n" +
		fmt.Sprintf(wrk.Script, "small.body", "", cfg.MaxRequests) + "```\n\nNginx configuration:\n\n```nginx\n" + ng.Config + "```\n")
	res.Markdown = b.String()
	return res, nil
}

func medianStreams(rs []sse.StreamResult) sse.StreamResult {
	if len(rs) == 0 {
		return sse.StreamResult{}
	}
	m := rs[0]
	med := func(f func(sse.StreamResult) time.Duration) time.Duration {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, float64(f(r)))
		}
		return time.Duration(harness.Median(xs))
	}
	m.TTFF50 = med(func(r sse.StreamResult) time.Duration { return r.TTFF50 })
	m.TTFF99 = med(func(r sse.StreamResult) time.Duration { return r.TTFF99 })
	m.Gap50 = med(func(r sse.StreamResult) time.Duration { return r.Gap50 })
	m.Gap99 = med(func(r sse.StreamResult) time.Duration { return r.Gap99 })
	m.GapMean = med(func(r sse.StreamResult) time.Duration { return r.GapMean })
	for _, r := range rs[1:] {
		m.Streams += r.Streams
		m.Errors += r.Errors
		m.Coalesced += r.Coalesced
		m.Gaps += r.Gaps
		m.FramesDiffer += r.FramesDiffer
		if m.FirstError == "" {
			m.FirstError = r.FirstError
		}
	}
	return m
}
