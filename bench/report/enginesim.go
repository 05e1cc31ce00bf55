package main

import (
	"context"
	"fmt"

	"github.com/fe64bb06/frontdoor/bench/enginesim"
)

func runEnginesim(ctx context.Context, cfg config) (string, []target, error) {
	dir, err := workDir(cfg, "enginesim")
	if err != nil {
		return "", nil, err
	}
	r, err := enginesim.Run(ctx, enginesim.Config{BinDir: cfg.binDir, Self: cfg.self, WorkDir: dir, ServerCPUs: cfg.serverCPUs,
		LoadCPUs: cfg.loadCPUs, Duration: cfg.d})
	if err != nil {
		return "", nil, err
	}
	return r.Markdown, []target{{goal: "enginesim at load, prefix caching on (issue 18)", known: true, info: true,
		measured: fmt.Sprintf("%.0f req/s and %.0f concurrent streams per engine core", r.RPSPerCore, r.StreamsPerCore)}}, nil
}
