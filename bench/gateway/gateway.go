// Package gateway measures mortred-gateway against calling the model
// server's port directly, and against Nginx doing the gateway's work, in
// one run: the built-in TESTMODEL with no delay (so the model costs
// almost nothing and the hop is what shows), batching off, the same wrk
// load on every path, interleaved. Each proxy runs in two placements in
// front of the same model server: A on the model server's core (its CPU
// is charged against the model: the worst case) and B on the load
// generator's core (the model server keeps its own: does the proxy cost
// the model throughput when the proxy has CPU of its own). Beside them,
// in both placements, the net/http floor (bench/router/floor): net/http's
// server and one http.Transport RoundTrip, forwarding the direct request
// as it is, to show what the library alone costs on this hop.
package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/compare"
	"github.com/fe64bb06/frontdoor/bench/internal/floorproc"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/nginx"
	"github.com/fe64bb06/frontdoor/bench/internal/wrk"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

// Config is one run. Zero values take the defaults in the comments.
type Config struct {
	// BinDir holds mortred-server and mortred-gateway; Self is this
	// benchmark's executable (it runs the net/http floor as a child);
	// WorkDir receives the generated configuration and logs.
	BinDir, Self, WorkDir string
	ServerCPUs, LoadCPUs  string
	// Duration of each measurement (default 5 s), Rounds (default 1).
	Duration time.Duration
	Rounds   int
	// Conns for the throughput run (default 32).
	Conns int
}

// Result is the section plus the figures for the targets.
type Result struct {
	Markdown string
	// AddedP50 is the gateway's p50 minus direct's at one connection;
	// Throughput the gateway's req/s over direct's at Conns, both in
	// placement A (on the model server's core). The OwnCore figures are
	// placement B (the proxy on the load generator's core). The Nginx
	// figures are the same for Nginx in the gateway's place.
	AddedP50, NginxAddedP50                   time.Duration
	AddedP50OwnCore, NginxAddedP50OwnCore     time.Duration
	Throughput, NginxThroughput               float64
	ThroughputOwnCore, NginxThroughputOwnCore float64
	// The Floor figures are the net/http floor's in the same placements:
	// added p50, throughput over direct; CPUOwnCore and FloorCPUOwnCore
	// are the gateway's and the floor's CPU µs per request in placement B
	// at Conns.
	FloorAddedP50, FloorAddedP50OwnCore     time.Duration
	FloorThroughput, FloorThroughputOwnCore float64
	CPUOwnCore, FloorCPUOwnCore             float64
}

// Path names: placement A keeps the names of the first version of this
// section, B says where the proxy runs.
const (
	gwOwn    = "gateway, own core"
	ngOwn    = "nginx, own core"
	floorA   = "net/http floor"
	floorOwn = "net/http floor, own core"
)

const (
	uri        = "/mortred_ai_server_v1/classification/testmodel"
	modelToken = "bench-model-token-0123456789"
	gwToken    = "bench-gateway-token-0123456789"
	scrapeTok  = "bench-metrics-token-0123456789"
	gwURI      = "/v1/models/TESTMODEL/infer"
)

// nginxLocation makes Nginx do what the gateway does for this request:
// check the external token, map the gateway's URI to the model's (404
// for any other), send the model's token and X-Forwarded-For, name the
// model in the response. "rewrite … break" ends the rewrite directives,
// so the return 404 is reached only by other paths.
var nginxLocation = `if ($http_authorization != "Bearer ` + gwToken + `") {
    return 401;
}
rewrite ^` + gwURI + `$ ` + uri + ` break;
return 404;
proxy_set_header Authorization "Bearer ` + modelToken + `";
proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
add_header X-Mortred-Model TESTMODEL always;
`

// Run writes the configuration, starts the model server, the gateway and
// Nginx, measures, stops them.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.Conns <= 0 {
		cfg.Conns = 32
	}
	modelPort, err := harness.FreePort()
	if err != nil {
		return Result{}, err
	}
	gwPort, err := harness.FreePort()
	if err != nil {
		return Result{}, err
	}
	gwOwnPort, err := harness.FreePort()
	if err != nil {
		return Result{}, err
	}
	confs, serverConf, err := writeConf(cfg.WorkDir, modelPort, gwPort, gwOwnPort)
	if err != nil {
		return Result{}, err
	}
	srv, err := harness.Start(cfg.WorkDir, harness.Spec{Name: "mortred-server", Bin: filepath.Join(cfg.BinDir, "mortred-server"),
		Args: []string{"--config", serverConf}, CPUs: cfg.ServerCPUs, Env: []string{"MORTRED_AUTH_TOKEN=" + modelToken}})
	if err != nil {
		return Result{}, err
	}
	defer srv.Stop()
	gwEnv := []string{"MORTRED_API_TOKEN=" + gwToken, "MORTRED_METRICS_TOKEN=" + scrapeTok, "MORTRED_AUTH_TOKEN=" + modelToken}
	gw, err := harness.Start(cfg.WorkDir, harness.Spec{Name: "mortred-gateway", Bin: filepath.Join(cfg.BinDir, "mortred-gateway"),
		Args: []string{"--config", confs[0]}, CPUs: cfg.ServerCPUs, Env: gwEnv})
	if err != nil {
		return Result{}, err
	}
	defer gw.Stop()
	gwB, err := harness.Start(cfg.WorkDir, harness.Spec{Name: "mortred-gateway-own-core", Bin: filepath.Join(cfg.BinDir, "mortred-gateway"),
		Args: []string{"--config", confs[1]}, CPUs: cfg.LoadCPUs, Env: gwEnv})
	if err != nil {
		return Result{}, err
	}
	defer gwB.Stop()
	ng, err := nginx.StartWith(ctx, cfg.WorkDir, cfg.ServerCPUs, map[string]int{"model": modelPort}, map[string]string{"model": nginxLocation})
	if err != nil {
		return Result{}, fmt.Errorf("nginx: %w", err)
	}
	defer ng.Stop()
	// Its own directory: nginx's pid file and temp paths live there.
	ngDir := filepath.Join(cfg.WorkDir, "own-core")
	if err := os.MkdirAll(ngDir, 0o755); err != nil {
		return Result{}, err
	}
	ngB, err := nginx.StartWith(ctx, ngDir, cfg.LoadCPUs, map[string]int{"model": modelPort}, map[string]string{"model": nginxLocation})
	if err != nil {
		return Result{}, fmt.Errorf("nginx on the load generator's core: %w", err)
	}
	defer ngB.Stop()
	// The floor in both placements, pinned like the gateway beside it.
	flA, err := floorproc.Start(ctx, cfg.Self, cfg.WorkDir, "floor-proxy", cfg.ServerCPUs, map[string]int{"model": modelPort})
	if err != nil {
		return Result{}, fmt.Errorf("net/http floor: %w", err)
	}
	defer flA.Proc.Stop()
	flB, err := floorproc.Start(ctx, cfg.Self, cfg.WorkDir, "floor-proxy-own-core", cfg.LoadCPUs, map[string]int{"model": modelPort})
	if err != nil {
		return Result{}, fmt.Errorf("net/http floor on the load generator's core: %w", err)
	}
	defer flB.Proc.Stop()
	direct := fmt.Sprintf("http://127.0.0.1:%d", modelPort)
	viaGW := fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	viaGWB := fmt.Sprintf("http://127.0.0.1:%d", gwOwnPort)
	if err := harness.Eventually(ctx, 60*time.Second, "model server /ready", func() error { return status(direct+"/ready", 200) }, srv); err != nil {
		return Result{}, err
	}
	if err := harness.Eventually(ctx, 30*time.Second, "gateway /healthz", func() error { return status(viaGW+"/healthz", 200) }, gw); err != nil {
		return Result{}, err
	}
	if err := harness.Eventually(ctx, 30*time.Second, "own-core gateway /healthz", func() error { return status(viaGWB+"/healthz", 200) }, gwB); err != nil {
		return Result{}, err
	}

	body := []byte(`{"images":["` + base64.StdEncoding.EncodeToString(testmodel.GrayPNG(64, 64, 200)) + `"]}`)
	model := compare.Proc{Label: "model server", PID: srv.PID()}
	paths := map[string]compare.Path{
		"direct": {Name: "direct", URL: direct + uri, Headers: map[string]string{"Authorization": "Bearer " + modelToken}, Procs: []compare.Proc{model}},
		"nginx": {Name: "nginx", URL: ng.URL("model") + gwURI, Headers: map[string]string{"Authorization": "Bearer " + gwToken},
			Procs: []compare.Proc{{Label: "nginx", PID: ng.Proc.PID()}, model}},
		"gateway": {Name: "gateway", URL: viaGW + gwURI, Headers: map[string]string{"Authorization": "Bearer " + gwToken},
			Procs: []compare.Proc{{Label: "gateway", PID: gw.PID()}, model}},
		// Same CPU columns as A: the label is the kind of proxy.
		ngOwn: {Name: ngOwn, URL: ngB.URL("model") + gwURI, Headers: map[string]string{"Authorization": "Bearer " + gwToken},
			Procs: []compare.Proc{{Label: "nginx", PID: ngB.Proc.PID()}, model}},
		gwOwn: {Name: gwOwn, URL: viaGWB + gwURI, Headers: map[string]string{"Authorization": "Bearer " + gwToken},
			Procs: []compare.Proc{{Label: "gateway", PID: gwB.PID()}, model}},
		// The floor cannot check a token, rewrite the path or name the
		// model without becoming a gateway of its own: it forwards
		// direct's request (the model's URI and token) unchanged.
		floorA: {Name: floorA, URL: flA.URL("model") + uri, Headers: map[string]string{"Authorization": "Bearer " + modelToken},
			Procs: []compare.Proc{{Label: "floor", PID: flA.Proc.PID()}, model}},
		floorOwn: {Name: floorOwn, URL: flB.URL("model") + uri, Headers: map[string]string{"Authorization": "Bearer " + modelToken},
			Procs: []compare.Proc{{Label: "floor", PID: flB.Proc.PID()}, model}},
	}
	names := []string{"direct", "nginx", floorA, "gateway", ngOwn, floorOwn, gwOwn}
	for _, n := range names {
		if err := check(ctx, paths[n], body); err != nil {
			return Result{}, err
		}
	}
	type load struct {
		name  string
		conns int
	}
	loads := []load{{"1 connection", 1}, {fmt.Sprintf("%d connections", cfg.Conns), cfg.Conns}}
	got := map[string][]compare.Measured{}
	// busy is CPU 0's and CPU 1's busy share during each measurement.
	busy := map[string][][2]float64{}
	var commands []string
	for round := range cfg.Rounds {
		for _, l := range loads {
			for _, n := range names {
				meter := startBusy(cfg.ServerCPUs, cfg.LoadCPUs)
				m, err := compare.Run(ctx, cfg.WorkDir, paths[n], wrk.Opts{Body: body, Conns: l.conns, Duration: cfg.Duration,
					MaxRequests: 2_000_000, CPUs: cfg.LoadCPUs, Name: "infer-" + fileName(n)})
				if err != nil {
					return Result{}, err
				}
				got[l.name+"|"+n] = append(got[l.name+"|"+n], m)
				busy[l.name+"|"+n] = append(busy[l.name+"|"+n], meter.stop())
				if round == 0 {
					commands = append(commands, fmt.Sprintf("%s   # %s, %s", m.Command, l.name, n))
				}
			}
		}
	}
	var res Result
	var b strings.Builder
	fmt.Fprintf(&b, "`mortred-server` with the built-in TESTMODEL (`testmodel`, no delay, `worker_nums = 2`, `max_batch_size = 1`), "+
		"and in front of it either `mortred-gateway` or Nginx, in two placements (below). Each request is one 64×64 gray PNG "+
		"in the envelope (`{\"images\":[…]}`, %d bytes); direct calls `POST %s` with the model's token, the gateway and Nginx "+
		"`POST %s` with the gateway's token (they swap in the model's).\n\n"+
		"Nginx (one worker, configured as for the router benchmark: `upstream` with `keepalive`, HTTP/1.1, `proxy_buffering off`) "+
		"does the gateway's work for this request in its `location /`: compares `Authorization` with the gateway's token (`if` … "+
		"`return 401`), maps the URI to the model's (`rewrite … break`; `return 404` for any other path), sets the model's "+
		"`Authorization` and `X-Forwarded-For`, adds `X-Mortred-Model`. It keeps Nginx's default `proxy_request_buffering on` "+
		"(the body is read whole before it is forwarded; the gateway streams it): a %d-byte body arrives with the request head, "+
		"so streaming could save nothing here. Unlike the gateway it keeps no metrics (`access_log off`, no counters). "+
		"The net/http floor (`bench/router/floor`: net/http's server, the request body read into a pooled buffer, one "+
		"http.Transport RoundTrip, the answer copied back; no auth, rewriting, metrics or limits) sits in each placement beside the "+
		"gateway, pinned like it. It forwards direct's request unchanged (`POST %s` with the model's token): checking the gateway's "+
		"token, mapping the URI and naming the model are the gateway's work, which a bare proxy cannot do without becoming one, so the "+
		"floor shows what the library alone costs on this hop, not a gateway doing less.\n\n"+
		"%d round(s) of %s per measurement, paths interleaved (each round: %s); medians shown.\n\n%s",
		len(body), uri, gwURI, len(body), uri, cfg.Rounds, cfg.Duration, "`"+strings.Join(names, "`, `")+"`", placements(cfg))
	for _, l := range loads {
		aggs := map[string]compare.Agg{}
		bz := map[string][2]float64{}
		for _, n := range names {
			aggs[n] = compare.Aggregate(got[l.name+"|"+n])
			bz[n] = medianBusy(busy[l.name+"|"+n])
		}
		fmt.Fprintf(&b, "**%s**\n\n%s\n", l.name, compare.Table(names, aggs, []string{"gateway", "nginx", "floor", "model server"}))
		d := aggs["direct"]
		if l.conns == 1 {
			res.AddedP50 = aggs["gateway"].P50 - d.P50
			res.NginxAddedP50 = aggs["nginx"].P50 - d.P50
			res.AddedP50OwnCore = aggs[gwOwn].P50 - d.P50
			res.NginxAddedP50OwnCore = aggs[ngOwn].P50 - d.P50
			res.FloorAddedP50 = aggs[floorA].P50 - d.P50
			res.FloorAddedP50OwnCore = aggs[floorOwn].P50 - d.P50
			continue
		}
		res.Throughput = aggs["gateway"].RPS / d.RPS
		res.NginxThroughput = aggs["nginx"].RPS / d.RPS
		res.ThroughputOwnCore = aggs[gwOwn].RPS / d.RPS
		res.NginxThroughputOwnCore = aggs[ngOwn].RPS / d.RPS
		res.FloorThroughput = aggs[floorA].RPS / d.RPS
		res.FloorThroughputOwnCore = aggs[floorOwn].RPS / d.RPS
		res.CPUOwnCore, res.FloorCPUOwnCore = aggs[gwOwn].CPUus["gateway"], aggs[floorOwn].CPUus["floor"]
		fmt.Fprintf(&b, "Shared core (A), what limits throughput here: %s %s %s Nginx, doing the same hop in the same placement, reaches %.0f%% of direct; "+
			"the net/http floor %.0f%%; the gateway %.0f%% (%.2f× Nginx's req/s). %s\n\n",
			compare.Limit("gateway", aggs["gateway"], "gateway", "model server", d), compare.Limit(floorA, aggs[floorA], "floor", "model server", d),
			compare.Limit("Nginx", aggs["nginx"], "nginx", "model server", d),
			100*res.NginxThroughput, 100*res.FloorThroughput, 100*res.Throughput, aggs["gateway"].RPS/aggs["nginx"].RPS, budget(d, aggs["gateway"], aggs["nginx"]))
		fmt.Fprintf(&b, "Own core (B), what limits throughput here: the gateway reaches %.0f%% of direct, the net/http floor %.0f%%, Nginx %.0f%% "+
			"(the gateway %.2f× Nginx's req/s). On the direct path CPU %s (the model server's) was %s busy and CPU %s (wrk's) %s. %s %s %s %s\n\n",
			100*res.ThroughputOwnCore, 100*res.FloorThroughputOwnCore, 100*res.NginxThroughputOwnCore, aggs[gwOwn].RPS/aggs[ngOwn].RPS,
			cpuName(cfg.ServerCPUs), pct(bz["direct"][0]), cpuName(cfg.LoadCPUs), pct(bz["direct"][1]),
			ownLimit(cfg, "the gateway", aggs[gwOwn], "gateway", bz[gwOwn], d, bz["direct"]),
			ownLimit(cfg, "the net/http floor", aggs[floorOwn], "floor", bz[floorOwn], d, bz["direct"]),
			ownLimit(cfg, "Nginx", aggs[ngOwn], "nginx", bz[ngOwn], d, bz["direct"]),
			FloorNote(res.ThroughputOwnCore, res.FloorThroughputOwnCore, res.CPUOwnCore, res.FloorCPUOwnCore))
	}
	b.WriteString(compare.CPUNote + "CPU busy shares are from the CPUs' lines in /proc/stat over each measurement (every process on the CPU, " +
		"so other work on the machine shows too), medians over rounds.\n\nCommands:\n\n```\n" + strings.Join(commands, "\n") +
		"\n" + flA.Command + "   # the net/http floor, shared core: this benchmark's own binary (go build ./bench/report) run as `floor-proxy`" +
		"\n" + flB.Command + "   # the net/http floor, own core" +
		"\n```\n\nNginx configuration (the own-core Nginx has the same one, on its own ports and temp paths):\n\n```nginx\n" + ng.Config + "```\n")
	res.Markdown = b.String()
	return res, nil
}

// placements says what A and B mean and what each measures.
func placements(cfg Config) string {
	if cfg.ServerCPUs == "" || cfg.LoadCPUs == "" {
		return "**Placements.** This run pinned nothing (fewer than 2 CPUs, or `-pin=false`), so A (`nginx`, `net/http floor`, `gateway`) and B " +
			"(`nginx, own core`, `net/http floor, own core`, `gateway, own core`) are two copies of each proxy in the same unpinned setup: the rows say nothing " +
			"about placement here.\n\n"
	}
	return fmt.Sprintf("**Placements**, both in front of the one model-server process on CPU %[1]s, with wrk on CPU %[2]s:\n\n"+
		"- **A, shared core** (rows `nginx`, `net/http floor`, `gateway`): the proxy is pinned to the model server's CPU %[1]s. Every microsecond of "+
		"proxy CPU is taken from the model, so this is the worst case, placed as in the router benchmark and comparable with Nginx: "+
		"no proxy reaches 90%% of direct here unless the proxy and the model server behind it together spend at most direct's "+
		"model-server CPU per request ÷ 0.9.\n"+
		"- **B, own core** (rows `nginx, own core`, `net/http floor, own core`, `gateway, own core`): a second gateway process, a "+
		"second floor and a second Nginx are pinned to "+
		"the load generator's CPU %[2]s, sharing it with wrk; the model server keeps CPU %[1]s to itself. This is the realistic "+
		"deployment (model servers on their own cores) and answers whether putting the proxy in front costs the model throughput "+
		"when the proxy has CPU of its own. wrk's own CPU competes with the proxy on CPU %[2]s, so B understates a machine with "+
		"spare cores.\n\n", cfg.ServerCPUs, cfg.LoadCPUs)
}

// ownLimit says, from the measured figures, what limits a proxy in
// placement B: the model server's core (and how much more CPU the model
// server spends behind the proxy), the load generator's core (wrk and the
// proxy not feeding a model server that has room), or neither. The model
// server's core counts as full when it was about as busy as on the direct
// path (within 2 points, or 97 %): a core 94 % busy behind the proxy and
// 99 % on the direct path idled for want of requests.
func ownLimit(cfg Config, name string, a compare.Agg, proxy string, busy [2]float64, direct compare.Agg, directBusy [2]float64) string {
	const label = "model server"
	s, ds := a.CPUus[label], direct.CPUus[label]
	msg := fmt.Sprintf("Behind %s the model server spent %.1f µs of CPU per request (direct %.1f) and %s itself %.1f µs; "+
		"CPU %s was %s busy, CPU %s (wrk and %s) %s.", name, s, ds, name, a.CPUus[proxy],
		cpuName(cfg.ServerCPUs), pct(busy[0]), cpuName(cfg.LoadCPUs), name, pct(busy[1]))
	modelFull := busy[0] >= 0.97 || (directBusy[0] >= 0 && busy[0] >= directBusy[0]-0.02)
	switch {
	case busy[0] < 0 || busy[1] < 0:
	case modelFull:
		msg += " The model server's core is the limit, as on the direct path"
		if s > ds && s > 0 {
			msg += fmt.Sprintf(": behind the proxy it spends %.1f µs more per request, which caps the path near %.0f%% of direct", s-ds, 100*ds/s)
		}
		msg += "."
	case busy[1] >= 0.85:
		msg += fmt.Sprintf(" The model server's core had room (direct: %s busy): wrk and %s, sharing CPU %s, did not feed it "+
			"fast enough, so %s's CPU per request is the limit here; a machine with a spare core for the proxy would not show it.",
			pct(directBusy[0]), name, cpuName(cfg.LoadCPUs), name)
	default:
		msg += " Neither core was full: the extra hop's latency, at this many connections, is the limit."
	}
	return msg
}

// cpuName is a pin for the text.
func cpuName(cpus string) string {
	if cpus == "" {
		return "(unpinned)"
	}
	return cpus
}

// medianBusy is the median of each CPU's busy share over rounds, -1 when
// any round could not read it.
func medianBusy(rs [][2]float64) [2]float64 {
	out := [2]float64{-1, -1}
	for i := range out {
		var xs []float64
		for _, r := range rs {
			if r[i] < 0 {
				xs = nil
				break
			}
			xs = append(xs, r[i])
		}
		if len(xs) > 0 {
			out[i] = harness.Median(xs)
		}
	}
	return out
}

// fileName turns a path name into a file name part ("gateway, own core"
// → "gateway-own-core", "net/http floor" → "net-http-floor").
func fileName(n string) string {
	return strings.Join(strings.FieldsFunc(n, func(r rune) bool { return r == ',' || r == ' ' || r == '/' }), "-")
}

// writeConf writes one control-plane file per gateway port (the gateways
// share the model-server file) and the model-server file, and returns
// their paths.
func writeConf(dir string, modelPort int, gwPorts ...int) ([]string, string, error) {
	for _, sub := range []string{"server", "models", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, "", err
		}
	}
	var confs []string
	for i, port := range gwPorts {
		name := "mortred.toml"
		if i > 0 {
			name = fmt.Sprintf("mortred-%d.toml", i+1)
		}
		conf := `[supervisor]
api_host = "127.0.0.1"
api_port = 1
autostart_default = false
start_concurrency = 1
log_dir = "logs"
log_rotate_mb = 1
server_conf_dir = "server"

[gateway]
host = "127.0.0.1"
port = ` + strconv.Itoa(port) + `
request_size_limit_mb = 64
max_connections = 1024
upstream_connect_timeout_ms = 2000
upstream_response_timeout_ms = 60000
upstream_idle_timeout_ms = 30000
`
		confs = append(confs, filepath.Join(dir, name))
		if err := os.WriteFile(confs[i], []byte(conf), 0o644); err != nil {
			return nil, "", err
		}
	}
	files := map[string]string{
		"server/TESTMODEL.toml": `[TESTMODEL]
host = "127.0.0.1"
port = ` + strconv.Itoa(modelPort) + `
server_uri = "` + uri + `"
worker_nums = 2
request_size_limit = 16
auth_token = ""
rate_limit_qps = 0
model_run_timeout = 30000
max_queue_depth = 0
max_batch_size = 1
max_batch_delay_ms = 0
max_request_items = 32
async_enabled = false
model_config_file_path = "../models/TESTMODEL.toml"
`,
		"models/TESTMODEL.toml": `type = "testmodel"
name = "TESTMODEL"
category = "classification"
version = "1"
batch_overhead_ms = 0
load_delay_ms = 0
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, "", err
		}
	}
	return confs, filepath.Join(dir, "server", "TESTMODEL.toml"), nil
}

var client = &http.Client{Timeout: 10 * time.Second}

func status(url string, want int) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// budget says what 90% of direct asks on the shared core: the proxy and
// the model server behind it together may spend at most direct's
// model-server CPU per request ÷ 0.9.
func budget(direct, gw, ng compare.Agg) string {
	const label = "model server"
	ds := direct.CPUus[label]
	if ds == 0 {
		return ""
	}
	limit := ds / 0.9
	msg := fmt.Sprintf("≥ 90%% of direct on the shared core needs the proxy and the model server behind it to spend together "+
		"at most direct's %.1f µs ÷ 0.9 = %.1f µs of CPU per request: the gateway's path spends %.1f (%.1f + %.1f), Nginx's %.1f (%.1f + %.1f).",
		ds, limit, gw.CPUus["gateway"]+gw.CPUus[label], gw.CPUus["gateway"], gw.CPUus[label],
		ng.CPUus["nginx"]+ng.CPUus[label], ng.CPUus["nginx"], ng.CPUus[label])
	if s := gw.CPUus[label]; s > ds {
		msg += fmt.Sprintf(" Behind the gateway the model server itself spends %.1f µs more per request than direct", s-ds)
		if s >= limit {
			msg += ", which alone uses up the budget"
		}
		msg += "."
	}
	return msg
}

// check makes sure a path answers 200 before it is measured and, on a
// proxy, that it names the model and refuses a wrong token: the proxies
// must do the work they are compared on.
func check(ctx context.Context, p compare.Path, body []byte) error {
	h, err := post(ctx, p, body, http.StatusOK)
	if err != nil || p.Name == "direct" || p.Name == floorA || p.Name == floorOwn {
		// direct and the floor send the model's own request: nothing
		// of the gateway's to check.
		return err
	}
	if got := h.Get("X-Mortred-Model"); got != "TESTMODEL" {
		return fmt.Errorf("%s: X-Mortred-Model %q, want TESTMODEL", p.Name, got)
	}
	wrong := p
	wrong.Headers = map[string]string{"Authorization": "Bearer not-" + gwToken}
	_, err = post(ctx, wrong, body, http.StatusUnauthorized)
	return err
}

// post sends the body and wants the status.
func post(ctx context.Context, p compare.Path, body []byte, want int) (http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s: POST %s: HTTP %d, want %d", p.Name, p.URL, resp.StatusCode, want)
	}
	return resp.Header, nil
}

// ownTarget is issue 17's goal for the gateway with a core of its own.
const ownTarget = 0.95

// FloorNote says what the net/http floor's own-core figures mean for the
// gateway's: whether the library alone, in the gateway's place, reaches
// the target, and how the two compare in throughput and CPU per request.
// "" when a figure is missing.
func FloorNote(gw, floor, gwCPU, floorCPU float64) string {
	if gw <= 0 || floor <= 0 || gwCPU <= 0 || floorCPU <= 0 {
		return ""
	}
	s := fmt.Sprintf("In the gateway's place the net/http floor reaches %.2f× direct spending %.1f µs of CPU per request; "+
		"the gateway %.2f× spending %.1f µs", floor, floorCPU, gw, gwCPU)
	if d := gwCPU - floorCPU; d >= 0 {
		s += fmt.Sprintf(" (%.1f µs more: its own work, the token check, URI mapping, metrics and limits). ", d)
	} else {
		s += fmt.Sprintf(" (%.1f µs less than the floor). ", -d)
	}
	if floor < ownTarget {
		return s + fmt.Sprintf("The library alone stays under %.2f× here, so what limits the gateway's figure is net/http and "+
			"http.Transport used for this hop at all on this machine, not only the gateway's own work.", ownTarget)
	}
	return s + fmt.Sprintf("The library alone reaches %.2f× here: what the gateway falls short by is its own.", ownTarget)
}
