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
	// The verdict is the router's figure; the floor's is beside it, so a
	// miss the library alone would make shows as such.
	withFloor := fmt.Sprintf("router %s, net/http floor %s per stream (over %d and %d streams)",
		harness.Bytes(r.BytesPerStream), harness.Bytes(r.FloorBytesPerStream), r.Opened, r.FloorOpened)
	return r.Markdown, []target{
		{goal: fmt.Sprintf("memory per open stream, %d idle SSE streams (issue 13)", cfg.idle), known: true, info: true, measured: measured},
		{goal: "memory per idle stream ≤ 40 KiB (issue 17)", known: r.Opened > 0, met: r.BytesPerStream <= 40<<10, measured: withFloor},
		{goal: "keys on: memory per idle stream ≤ the net/http floor's + 2 KiB (issue 27)", known: r.Opened > 0 && r.FloorOpened > 0,
			met:      r.BytesPerStream <= r.FloorBytesPerStream+2<<10,
			measured: fmt.Sprintf("%s over the floor (%s)", harness.Bytes(r.BytesPerStream-r.FloorBytesPerStream), withFloor)},
	}, nil
}
