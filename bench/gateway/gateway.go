// Package gateway measures mortred-gateway against calling the model
// server's port directly, in one run: the built-in TESTMODEL with no
// delay (so the model costs almost nothing and the hop is what shows),
// batching off, the same wrk load on both paths, interleaved.
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
	// Throughput the gateway's req/s over direct's at Conns.
	AddedP50   time.Duration
	Throughput float64
}

const (
	uri        = "/mortred_ai_server_v1/classification/testmodel"
	modelToken = "bench-model-token-0123456789"
	gwToken    = "bench-gateway-token-0123456789"
	scrapeTok  = "bench-metrics-token-0123456789"
)

// Run writes the configuration, starts both processes, measures, stops.
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
		"gateway": {Name: "gateway", URL: viaGW + "/v1/models/TESTMODEL/infer", Headers: map[string]string{"Authorization": "Bearer " + gwToken},
			Procs: []compare.Proc{{Label: "gateway", PID: gw.PID()}, model}},
	}
	names := []string{"direct", "gateway"}
	for _, n := range names {
		if err := post(ctx, paths[n], body); err != nil {
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
	fmt.Fprintf(&b, "`mortred-server` with the built-in TESTMODEL (`testmodel`, no delay, `worker_nums = 2`, `max_batch_size = 1`) and "+
		"`mortred-gateway` in front of it, both pinned like the router benchmark. Each request is one 64×64 gray PNG in the envelope "+
		"(`{\"images\":[…]}`, %d bytes); direct calls `POST %s` with the model's token, the gateway `POST /v1/models/TESTMODEL/infer` "+
		"with its own (it swaps in the model's). %d round(s) of %s per measurement, paths interleaved; medians shown.\n\n",
		len(body), uri, cfg.Rounds, cfg.Duration)
	for _, l := range loads {
		aggs := map[string]compare.Agg{}
		for _, n := range names {
			aggs[n] = compare.Aggregate(got[l.name+"|"+n])
		}
		fmt.Fprintf(&b, "**%s**\n\n%s\n", l.name, compare.Table(names, aggs, []string{"gateway", "model server"}))
		if l.conns == 1 {
			res.AddedP50 = aggs["gateway"].P50 - aggs["direct"].P50
		} else {
			res.Throughput = aggs["gateway"].RPS / aggs["direct"].RPS
			fmt.Fprintf(&b, "What limits throughput here: %s With a model this cheap, ≥ 90%% of direct on a shared core "+
				"would need the gateway to cost under a ninth of the model server's CPU per request.\n\n",
				compare.Limit("gateway", aggs["gateway"], "gateway", "model server", aggs["direct"]))
		}
	}
	b.WriteString(compare.CPUNote + "\nCommands:\n\n```\n" + strings.Join(commands, "\n") + "\n```\n")
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

// post checks that a path answers 200 before it is measured.
func post(ctx context.Context, p compare.Path, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: POST %s: HTTP %d", p.Name, p.URL, resp.StatusCode)
	}
	return nil
}
