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
	r, err := gateway.Run(ctx, gateway.Config{BinDir: cfg.binDir, WorkDir: dir, ServerCPUs: cfg.serverCPUs, LoadCPUs: cfg.loadCPUs,
		Duration: cfg.d, Rounds: cfg.rounds})
	if err != nil {
		return "", []target{{goal: "gateway added p50 < 0.3 ms (issue 11)"}, {goal: "gateway throughput ≥ 90% of direct (issue 11)"}}, err
	}
	return r.Markdown, []target{
		{goal: "gateway added p50 < 0.3 ms (issue 11)", known: true, met: r.AddedP50 < 300*time.Microsecond,
			measured: fmt.Sprintf("%s ms (Nginx in its place adds %s ms)", harness.Ms(r.AddedP50), harness.Ms(r.NginxAddedP50))},
		{goal: "gateway throughput ≥ 90% of direct (issue 11)", known: true, met: r.Throughput >= 0.9,
			measured: fmt.Sprintf("%.0f%% of direct (Nginx in its place %.0f%%)", 100*r.Throughput, 100*r.NginxThroughput)},
	}, nil
}
