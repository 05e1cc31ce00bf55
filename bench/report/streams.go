package main

import (
	"context"
	"fmt"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/streams"
)

func runIdle(ctx context.Context, cfg config) (string, []target, error) {
	dir, err := workDir(cfg, "streams")
	if err != nil {
		return "", nil, err
	}
	r, err := streams.Run(ctx, streams.Config{BinDir: cfg.binDir, Self: cfg.self, WorkDir: dir, ServerCPUs: cfg.serverCPUs,
		LoadCPUs: cfg.loadCPUs, N: cfg.idle, NoFile: cfg.nofile})
	if err != nil {
		return "", nil, err
	}
	measured := fmt.Sprintf("%s per stream over %d streams", harness.Bytes(r.BytesPerStream), r.Opened)
	return r.Markdown, []target{
		{goal: fmt.Sprintf("memory per open stream, %d idle SSE streams (issue 13)", cfg.idle), known: true, info: true, measured: measured},
		{goal: "memory per idle stream ≤ 40 KiB (issue 17)", known: r.Opened > 0, met: r.BytesPerStream <= 40<<10, measured: measured},
	}, nil
}
