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
			{goal: "router added p50 ≤ 0.1 ms, small requests (issue 17)"},
			{goal: "router CPU per request ≤ 2.5× Nginx's, small requests (issue 17)"},
			{goal: "router 1 MiB body throughput ≥ 0.9× Nginx's (issue 17)"},
			{goal: "streams: TTFF and gaps 1.00–1.01× direct, no coalesced frames (issue 17)"},
			{goal: keysCPUGoal}, {goal: keysCostGoal}, {goal: keysP50Goal}, {goal: keysTTFFGoal},
		}, err
	}
	streamsOK := r.StreamTTFF <= 1.01 && r.StreamGap <= 1.01 && r.StreamCoalesced == 0
	return r.Markdown, []target{
		{goal: "router added p50 < 0.2 ms, small requests (issue 4)", known: true, met: r.AddedP50 < 200*time.Microsecond,
			measured: fmt.Sprintf("%s ms (Nginx adds %s ms)", harness.Ms(r.AddedP50), harness.Ms(r.NginxAddedP50))},
		{goal: "router throughput ≥ Nginx's, small requests (issue 4)", known: true, met: r.RouterVsNginx >= 1,
			measured: fmt.Sprintf("%.2f× Nginx", r.RouterVsNginx)},
		{goal: "router added p50 ≤ 0.1 ms, small requests (issue 17)", known: true, met: r.AddedP50 <= 100*time.Microsecond,
			measured: fmt.Sprintf("%s ms (net/http floor adds %s ms, Nginx %s ms)", harness.Ms(r.AddedP50), harness.Ms(r.FloorAddedP50), harness.Ms(r.NginxAddedP50))},
		{goal: "router CPU per request ≤ 2.5× Nginx's, small requests (issue 17)", known: r.NginxCPU > 0, met: r.CPUVsNginx <= 2.5,
			measured: fmt.Sprintf("router %.1f µs, net/http floor %.1f µs, Nginx %.1f µs: the router is %.2f× Nginx, the library alone %.2f×",
				r.RouterCPU, r.FloorCPU, r.NginxCPU, r.CPUVsNginx, r.FloorCPUVsNginx)},
		{goal: "router 1 MiB body throughput ≥ 0.9× Nginx's (issue 17)", known: r.BigVsNginx > 0, met: r.BigVsNginx >= 0.9,
			measured: fmt.Sprintf("%.2f× Nginx at 1 connection, %.2f× at 8 (net/http floor %.2f× and %.2f×)",
				r.BigVsNginx1, r.BigVsNginx8, r.FloorBigVsNginx1, r.FloorBigVsNginx8)},
		{goal: "streams: TTFF and gaps 1.00–1.01× direct, no coalesced frames (issue 17)", known: r.StreamTTFF > 0, met: streamsOK,
			measured: fmt.Sprintf("TTFF p50 %.3f×, gap p50 %.3f× direct, %d coalesced", r.StreamTTFF, r.StreamGap, r.StreamCoalesced)},
		{goal: keysCPUGoal, known: r.FloorCPU > 0 && r.KeysCPU > 0, met: r.KeysCPU <= 1.15*r.FloorCPU,
			measured: fmt.Sprintf("keys on %.1f µs, keys off %.1f µs, net/http floor %.1f µs: %.2f× the floor with keys on, %.2f× off",
				r.KeysCPU, r.RouterCPU, r.FloorCPU, ratio(r.KeysCPU, r.FloorCPU), ratio(r.RouterCPU, r.FloorCPU))},
		{goal: keysCostGoal, known: r.KeysCPU > 0 && r.RouterCPU > 0, met: r.KeysCPU-r.RouterCPU <= 3,
			measured: fmt.Sprintf("%+.1f µs per request (keys on %.1f µs − keys off %.1f µs, two processes in one run)", r.KeysCPU-r.RouterCPU, r.KeysCPU, r.RouterCPU)},
		{goal: keysP50Goal, known: r.KeysCPU > 0, met: r.KeysAddedP50 <= r.FloorAddedP50+15*time.Microsecond,
			measured: fmt.Sprintf("keys on adds %s ms, the floor %s ms (keys off %s ms)", harness.Ms(r.KeysAddedP50), harness.Ms(r.FloorAddedP50), harness.Ms(r.AddedP50))},
		{goal: keysTTFFGoal, known: r.KeysStreamTTFF > 0 && r.FloorStreamTTFF > 0, met: r.KeysStreamTTFF <= r.FloorStreamTTFF,
			measured: fmt.Sprintf("TTFF p50 %.3f× direct with keys on, the floor %.3f×", r.KeysStreamTTFF, r.FloorStreamTTFF)},
	}, nil
}

// Issue 27's targets for the router with keys on, against the net/http
// floor measured in the same run.
const (
	keysCPUGoal  = "keys on: router CPU per small request ≤ 1.15× the net/http floor's (issue 27)"
	keysCostGoal = "keys add ≤ 3 µs CPU per small request (issue 27)"
	keysP50Goal  = "keys on: added p50 ≤ the floor's + 0.015 ms, small requests (issue 27)"
	keysTTFFGoal = "keys on: stream TTFF p50 ≤ the floor's (issue 27)"
)

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
