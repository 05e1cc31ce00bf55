package mortredhosts

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/compare"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/wrk"
	"github.com/fe64bb06/frontdoor/mortred/model/testmodel"
)

// EdgeResult is part 1: the TLS edge in front of one gateway against the
// gateway direct.
type EdgeResult struct {
	// Throughput is the edge's req/s over the gateway's at Conns;
	// AddedP50 the edge's p50 minus the gateway's at one connection, and
	// P50Ratio the edge's p50 over the gateway's there.
	Throughput float64
	AddedP50   time.Duration
	P50Ratio   float64
	Conns      int
}

// Path names of part 1.
const (
	pathDirect = "gateway direct"
	pathEdge   = "TLS edge → gateway"
)

// runEdge measures TESTMODEL (no delay) through the gateway direct and
// through Nginx from init-edge in front of it, interleaved.
func runEdge(ctx context.Context, cfg Config, dir string) (EdgeResult, string, error) {
	res := EdgeResult{Conns: cfg.EdgeConns}
	var ports [3]int
	for i := range ports {
		p, err := harness.FreePort()
		if err != nil {
			return res, "", err
		}
		ports[i] = p
	}
	modelPort, gwPort, edgePort := ports[0], ports[1], ports[2]
	// The supervisor's API is not run: its port is only a placeholder.
	p, err := writePlane(filepath.Join(dir, "conf"), "127.0.0.1", 1, gwPort, nil, []model{{id: "TESTMODEL", port: modelPort}})
	if err != nil {
		return res, "", err
	}
	srv, err := harness.Start(dir, harness.Spec{Name: "mortred-server", Bin: filepath.Join(cfg.BinDir, "mortred-server"),
		Args: []string{"--config", p.serverFile("TESTMODEL")}, CPUs: cfg.ServerCPUs, Env: childEnv()})
	if err != nil {
		return res, "", err
	}
	defer srv.Stop()
	gw, err := harness.Start(dir, harness.Spec{Name: "mortred-gateway", Bin: filepath.Join(cfg.BinDir, "mortred-gateway"),
		Args: []string{"--config", p.file}, CPUs: cfg.ServerCPUs, Env: childEnv()})
	if err != nil {
		return res, "", err
	}
	defer gw.Stop()
	direct := "http://" + p.gatewayAddr()
	if err := harness.Eventually(ctx, 60*time.Second, "model server /ready", func() error {
		_, err := want200(ctx, client, "GET", fmt.Sprintf("http://127.0.0.1:%d/ready", modelPort), "", nil)
		return err
	}, srv); err != nil {
		return res, "", err
	}
	if err := harness.Eventually(ctx, 30*time.Second, "gateway /healthz", func() error {
		_, err := want200(ctx, client, "GET", direct+"/healthz", "", nil)
		return err
	}, gw); err != nil {
		return res, "", err
	}
	e, err := startEdge(ctx, dir, "nginx-edge", cfg.BinDir, filepath.Join(dir, "edge"), cfg.ServerCPUs, edgePort, "--gateway-addr", p.gatewayAddr())
	if err != nil {
		return res, "", fmt.Errorf("the edge: %w", err)
	}
	defer e.stop()

	const uri = "/v1/models/TESTMODEL/infer"
	body := []byte(`{"images":["` + base64.StdEncoding.EncodeToString(testmodel.GrayPNG(64, 64, 200)) + `"]}`)
	// Both paths answer the model's 200 before they are measured.
	for _, c := range []struct{ url string }{{direct + uri}, {e.url(uri)}} {
		hc := client
		if strings.HasPrefix(c.url, "https:") {
			hc = e.client
		}
		r, err := want200(ctx, hc, "POST", c.url, apiToken, body)
		if err != nil {
			return res, "", err
		}
		if got := r.header.Get("X-Mortred-Model"); got != "TESTMODEL" {
			return res, "", fmt.Errorf("POST %s: X-Mortred-Model %q, want TESTMODEL", c.url, got)
		}
	}
	auth := map[string]string{"Authorization": "Bearer " + apiToken}
	model, gateway := compare.Proc{Label: "model server", PID: srv.PID()}, compare.Proc{Label: "gateway", PID: gw.PID()}
	paths := map[string]compare.Path{
		pathDirect: {Name: pathDirect, URL: direct + uri, Headers: auth, Procs: []compare.Proc{gateway, model}},
		pathEdge: {Name: pathEdge, URL: e.url(uri), Headers: auth,
			Procs: []compare.Proc{{Label: "nginx", PID: e.worker}, gateway, model}},
	}
	names := []string{pathDirect, pathEdge}
	loads := []struct {
		name  string
		conns int
	}{{"1 connection", 1}, {fmt.Sprintf("%d connections", cfg.EdgeConns), cfg.EdgeConns}}
	got := map[string][]compare.Measured{}
	var commands []string
	for round := range cfg.Rounds {
		for _, l := range loads {
			for _, n := range names {
				m, err := compare.Run(ctx, dir, paths[n], wrk.Opts{Body: body, Conns: l.conns, Duration: cfg.Duration,
					MaxRequests: 2_000_000, CPUs: cfg.LoadCPUs, Name: "edge-" + fileName(n)})
				if err != nil {
					return res, "", err
				}
				got[l.name+"|"+n] = append(got[l.name+"|"+n], m)
				if round == 0 {
					commands = append(commands, fmt.Sprintf("%s   # %s, %s", m.Command, l.name, n))
				}
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "`mortred-server` with the built-in TESTMODEL (no delay, `worker_nums = 2`, batching off) behind one `mortred-gateway` "+
		"process, each request one 64×64 gray PNG in the envelope (%d bytes), `POST %s` with the gateway's token. `%s` is wrk calling the "+
		"gateway's plain-HTTP port; `%s` is wrk calling, over HTTPS, Nginx with the configuration `%s` wrote "+
		"(self-signed certificate, TLS 1.2/1.3, one worker, its `access_log` on, keep-alive to the gateway), which forwards plain HTTP to the same gateway. "+
		"**The edge's figures include TLS termination** (wrk's connections are kept alive, so it is the per-request encryption and "+
		"decryption, not handshakes) and Nginx's access log. %s; %d round(s) of %s per measurement, paths interleaved; medians shown.\n\n",
		len(body), uri, pathDirect, pathEdge, e.init, placement(cfg), cfg.Rounds, cfg.Duration)
	for _, l := range loads {
		aggs := map[string]compare.Agg{}
		for _, n := range names {
			aggs[n] = compare.Aggregate(got[l.name+"|"+n])
		}
		fmt.Fprintf(&b, "**%s**\n\n%s\n", l.name, compare.Table(names, aggs, []string{"nginx", "gateway", "model server"}))
		d, ed := aggs[pathDirect], aggs[pathEdge]
		if l.conns == 1 {
			res.AddedP50 = ed.P50 - d.P50
			res.P50Ratio = ratio(float64(ed.P50), float64(d.P50))
			continue
		}
		res.Throughput = ratio(ed.RPS, d.RPS)
		if cfg.ServerCPUs != "" && ed.CPUus["nginx"] > 0 {
			// Nginx, the gateway and the model server share one core:
			// Nginx's CPU per request is taken from the two behind it.
			behind, direct := ed.CPUus["gateway"]+ed.CPUus["model server"], d.CPUus["gateway"]+d.CPUus["model server"]
			fmt.Fprintf(&b, "At %d connections the edge reaches %.2f× the gateway's req/s. Nginx spent %.1f µs of CPU per request "+
				"(TLS included) on the core it shares with the gateway (%.1f µs) and the model server (%.1f µs); direct, those two spent %.1f µs together, "+
				"so with that core full the edge can reach about %.0f%% of direct.\n\n",
				l.conns, res.Throughput, ed.CPUus["nginx"], ed.CPUus["gateway"], ed.CPUus["model server"], direct, 100*ratio(direct, ed.CPUus["nginx"]+behind))
		}
	}
	fmt.Fprintf(&b, "At one connection the edge adds %s ms to the p50 (%.2f× the gateway's).\n\n", compare.SignedMs(res.AddedP50), res.P50Ratio)
	b.WriteString(compare.CPUNote + "\nCommands:\n\n```\n" + e.init + "\n" + strings.Join(commands, "\n") + "\n```\n\n" +
		"The edge's server blocks (`mortred-edge.conf`, as written):\n\n```nginx\n" + e.site + "```\n")
	return res, b.String(), nil
}

// placement says where part 1's processes ran.
func placement(cfg Config) string {
	if cfg.ServerCPUs == "" || cfg.LoadCPUs == "" {
		return "Nothing was pinned (fewer than 2 CPUs, or `-pin=false`)"
	}
	return fmt.Sprintf("The model server, the gateway and Nginx are pinned to CPU %s, wrk to CPU %s, as in the gateway section's shared-core placement",
		cfg.ServerCPUs, cfg.LoadCPUs)
}

// fileName turns a path name into a file name part.
func fileName(n string) string {
	return strings.Join(strings.FieldsFunc(n, func(r rune) bool { return r == ' ' || r == ',' || r == '→' || r == '/' }), "-")
}

// ratio is a/b, 0 when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
