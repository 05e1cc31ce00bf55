// Package gateway measures mortred-gateway against calling the model
// server's port directly, and against Nginx doing the gateway's work in
// the same placement, in one run: the built-in TESTMODEL with no delay
// (so the model costs almost nothing and the hop is what shows),
// batching off, the same wrk load on every path, interleaved.
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
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/nginx"
	"github.com/fe64bb06/frontdoor/bench/internal/wrk"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

// Config is one run. Zero values take the defaults in the comments.
type Config struct {
	// BinDir holds mortred-server and mortred-gateway; WorkDir receives
	// the generated configuration and logs.
	BinDir, WorkDir      string
	ServerCPUs, LoadCPUs string
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
	// Throughput the gateway's req/s over direct's at Conns. The Nginx
	// figures are the same for Nginx in the gateway's place.
	AddedP50, NginxAddedP50     time.Duration
	Throughput, NginxThroughput float64
}

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
	conf, serverConf, err := writeConf(cfg.WorkDir, modelPort, gwPort)
	if err != nil {
		return Result{}, err
	}
	srv, err := harness.Start(cfg.WorkDir, harness.Spec{Name: "mortred-server", Bin: filepath.Join(cfg.BinDir, "mortred-server"),
		Args: []string{"--config", serverConf}, CPUs: cfg.ServerCPUs, Env: []string{"MORTRED_AUTH_TOKEN=" + modelToken}})
	if err != nil {
		return Result{}, err
	}
	defer srv.Stop()
	gw, err := harness.Start(cfg.WorkDir, harness.Spec{Name: "mortred-gateway", Bin: filepath.Join(cfg.BinDir, "mortred-gateway"),
		Args: []string{"--config", conf}, CPUs: cfg.ServerCPUs,
		Env: []string{"MORTRED_API_TOKEN=" + gwToken, "MORTRED_METRICS_TOKEN=" + scrapeTok, "MORTRED_AUTH_TOKEN=" + modelToken}})
	if err != nil {
		return Result{}, err
	}
	defer gw.Stop()
	ng, err := nginx.StartWith(ctx, cfg.WorkDir, cfg.ServerCPUs, map[string]int{"model": modelPort}, map[string]string{"model": nginxLocation})
	if err != nil {
		return Result{}, fmt.Errorf("nginx: %w", err)
	}
	defer ng.Stop()
	direct := fmt.Sprintf("http://127.0.0.1:%d", modelPort)
	viaGW := fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	if err := harness.Eventually(ctx, 60*time.Second, "model server /ready", func() error { return status(direct+"/ready", 200) }, srv); err != nil {
		return Result{}, err
	}
	if err := harness.Eventually(ctx, 30*time.Second, "gateway /healthz", func() error { return status(viaGW+"/healthz", 200) }, gw); err != nil {
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
	}
	names := []string{"direct", "nginx", "gateway"}
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
	var commands []string
	for round := range cfg.Rounds {
		for _, l := range loads {
			for _, n := range names {
				m, err := compare.Run(ctx, cfg.WorkDir, paths[n], wrk.Opts{Body: body, Conns: l.conns, Duration: cfg.Duration,
					MaxRequests: 2_000_000, CPUs: cfg.LoadCPUs, Name: "infer-" + n})
				if err != nil {
					return Result{}, err
				}
				got[l.name+"|"+n] = append(got[l.name+"|"+n], m)
				if round == 0 {
					commands = append(commands, fmt.Sprintf("%s   # %s, %s", m.Command, l.name, n))
				}
			}
		}
	}
	var res Result
	var b strings.Builder
	fmt.Fprintf(&b, "`mortred-server` with the built-in TESTMODEL (`testmodel`, no delay, `worker_nums = 2`, `max_batch_size = 1`), "+
		"and in front of it either `mortred-gateway` or Nginx, all pinned like the router benchmark. Each request is one 64×64 gray PNG "+
		"in the envelope (`{\"images\":[…]}`, %d bytes); direct calls `POST %s` with the model's token, the gateway and Nginx "+
		"`POST %s` with the gateway's token (they swap in the model's).\n\n"+
		"Nginx (one worker, configured as for the router benchmark: `upstream` with `keepalive`, HTTP/1.1, `proxy_buffering off`) "+
		"does the gateway's work for this request in its `location /`: compares `Authorization` with the gateway's token (`if` … "+
		"`return 401`), maps the URI to the model's (`rewrite … break`; `return 404` for any other path), sets the model's "+
		"`Authorization` and `X-Forwarded-For`, adds `X-Mortred-Model`. It keeps Nginx's default `proxy_request_buffering on` "+
		"(the body is read whole before it is forwarded; the gateway streams it): a %d-byte body arrives with the request head, "+
		"so streaming could save nothing here. Unlike the gateway it keeps no metrics (`access_log off`, no counters). "+
		"%d round(s) of %s per measurement, paths interleaved; medians shown.\n\n",
		len(body), uri, gwURI, len(body), cfg.Rounds, cfg.Duration)
	for _, l := range loads {
		aggs := map[string]compare.Agg{}
		for _, n := range names {
			aggs[n] = compare.Aggregate(got[l.name+"|"+n])
		}
		fmt.Fprintf(&b, "**%s**\n\n%s\n", l.name, compare.Table(names, aggs, []string{"gateway", "nginx", "model server"}))
		d := aggs["direct"]
		if l.conns == 1 {
			res.AddedP50 = aggs["gateway"].P50 - d.P50
			res.NginxAddedP50 = aggs["nginx"].P50 - d.P50
			continue
		}
		res.Throughput = aggs["gateway"].RPS / d.RPS
		res.NginxThroughput = aggs["nginx"].RPS / d.RPS
		fmt.Fprintf(&b, "What limits throughput here: %s %s Nginx, doing the same hop in the same placement, reaches %.0f%% of direct; "+
			"the gateway %.0f%% (%.2f× Nginx's req/s). %s\n\n",
			compare.Limit("gateway", aggs["gateway"], "gateway", "model server", d), compare.Limit("Nginx", aggs["nginx"], "nginx", "model server", d),
			100*res.NginxThroughput, 100*res.Throughput, aggs["gateway"].RPS/aggs["nginx"].RPS, budget(d, aggs["gateway"], aggs["nginx"]))
	}
	b.WriteString(compare.CPUNote + "\nCommands:\n\n```\n" + strings.Join(commands, "\n") + "\n```\n\nNginx configuration:\n\n```nginx\n" + ng.Config + "```\n")
	res.Markdown = b.String()
	return res, nil
}

// writeConf writes a control-plane file and one model-server file, and
// returns their paths.
func writeConf(dir string, modelPort, gwPort int) (string, string, error) {
	for _, sub := range []string{"server", "models", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return "", "", err
		}
	}
	files := map[string]string{
		"mortred.toml": `[supervisor]
api_host = "127.0.0.1"
api_port = 1
autostart_default = false
start_concurrency = 1
log_dir = "logs"
log_rotate_mb = 1
server_conf_dir = "server"

[gateway]
host = "127.0.0.1"
port = ` + strconv.Itoa(gwPort) + `
request_size_limit_mb = 64
max_connections = 1024
upstream_connect_timeout_ms = 2000
upstream_response_timeout_ms = 60000
upstream_idle_timeout_ms = 30000
`,
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
			return "", "", err
		}
	}
	return filepath.Join(dir, "mortred.toml"), filepath.Join(dir, "server", "TESTMODEL.toml"), nil
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
	if err != nil || p.Name == "direct" {
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
