package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fe64bb06/frontdoor/bench/gateway"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

func runGateway(ctx context.Context, cfg config) (string, []target, error) {
	dir, err := workDir(cfg, "gateway")
	if err != nil {
		return "", nil, err
	}
	r, err := gateway.Run(ctx, gateway.Config{BinDir: cfg.binDir, Self: cfg.self, WorkDir: dir, ServerCPUs: cfg.serverCPUs, LoadCPUs: cfg.loadCPUs,
		Duration: cfg.d, Rounds: cfg.rounds})
	if err != nil {
		return "", []target{{goal: "gateway added p50 < 0.3 ms (issue 11)"}, {goal: "gateway throughput ≥ 90% of direct (issue 11)"},
			{goal: "gateway with a core of its own ≥ 0.95× direct (issue 17)"}}, err
	}
	return r.Markdown, []target{
		{goal: "gateway added p50 < 0.3 ms (issue 11)", known: true, met: r.AddedP50 < 300*time.Microsecond,
			measured: fmt.Sprintf("%s ms on the model's core (Nginx in its place adds %s ms); %s ms with a core of its own (Nginx %s ms)",
				harness.Ms(r.AddedP50), harness.Ms(r.NginxAddedP50), harness.Ms(r.AddedP50OwnCore), harness.Ms(r.NginxAddedP50OwnCore)),
			detail: p50Detail(r)},
		{goal: "gateway throughput ≥ 90% of direct (issue 11)", known: true, met: r.ThroughputOwnCore >= 0.9,
			measured: fmt.Sprintf("%.0f%% of direct on the model's core (Nginx %.0f%%); %.0f%% with a core of its own (Nginx %.0f%%)",
				100*r.Throughput, 100*r.NginxThroughput, 100*r.ThroughputOwnCore, 100*r.NginxThroughputOwnCore),
			detail: throughputDetail(r)},
		{goal: "gateway with a core of its own ≥ 0.95× direct (issue 17)", known: true, met: r.ThroughputOwnCore >= 0.95,
			// The verdict is the gateway's figure; the floor's is beside it.
			measured: fmt.Sprintf("gateway %.2f× direct at %.1f µs CPU/req, net/http floor %.2f× at %.1f µs (Nginx %.2f×)",
				r.ThroughputOwnCore, r.CPUOwnCore, r.FloorThroughputOwnCore, r.FloorCPUOwnCore, r.NginxThroughputOwnCore)},
	}, nil
}

// throughputDetail names the placement the verdict is for (own core) and
// how the shared core did, each beside Nginx's outcome in that placement,
// e.g. " (own core, as for Nginx); shared core: missed, as for Nginx".
func throughputDetail(r gateway.Result) string {
	word := func(met bool) string {
		if met {
			return "met"
		}
		return "missed"
	}
	vsNginx := func(gw, ng float64) string {
		if (gw >= 0.9) == (ng >= 0.9) {
			return ", as for Nginx"
		}
		return ", Nginx " + word(ng >= 0.9)
	}
	return " (own core" + vsNginx(r.ThroughputOwnCore, r.NginxThroughputOwnCore) + "); shared core: " +
		word(r.Throughput >= 0.9) + vsNginx(r.Throughput, r.NginxThroughput)
}

// p50Detail says the p50 verdict is for the model's core (the worst
// case) and how the own core did.
func p50Detail(r gateway.Result) string {
	own := "missed"
	if r.AddedP50OwnCore < 300*time.Microsecond {
		own = "met"
	}
	return " (model's core); own core: " + own
}
