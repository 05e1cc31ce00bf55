package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/router"
)

func runRouter(ctx context.Context, cfg config) (string, []target, error) {
	dir, err := workDir(cfg, "router")
	if err != nil {
		return "", nil, err
	}
	r, err := router.Run(ctx, router.Config{BinDir: cfg.binDir, Self: cfg.self, WorkDir: dir, ServerCPUs: cfg.serverCPUs,
		LoadCPUs: cfg.loadCPUs, Duration: cfg.d, Rounds: cfg.rounds})
	if err != nil {
		return "", []target{
			{goal: "router added p50 < 0.2 ms (issue 4)"},
			{goal: "router throughput ≥ Nginx's (issue 4)"},
		}, err
	}
	return r.Markdown, []target{
		{goal: "router added p50 < 0.2 ms, small requests (issue 4)", known: true, met: r.AddedP50 < 200*time.Microsecond,
			measured: fmt.Sprintf("%s ms (Nginx adds %s ms)", harness.Ms(r.AddedP50), harness.Ms(r.NginxAddedP50))},
		{goal: "router throughput ≥ Nginx's, small requests (issue 4)", known: true, met: r.RouterVsNginx >= 1,
			measured: fmt.Sprintf("%.2f× Nginx", r.RouterVsNginx)},
	}, nil
}
