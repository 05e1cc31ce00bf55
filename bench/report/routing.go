package main

import (
	"context"
	"fmt"
	"math"

	"github.com/fe64bb06/frontdoor/bench/routing"
)

func runRouting(ctx context.Context, cfg config) (string, []target, error) {
	dir, err := workDir(cfg, "routing")
	if err != nil {
		return "", nil, err
	}
	r, err := routing.Run(ctx, routing.Config{BinDir: cfg.binDir, WorkDir: dir, ServerCPUs: cfg.serverCPUs,
		Duration: cfg.d, Replicas: cfg.routingReplicas, Workloads: cfg.routingWorkloads, Policies: cfg.routingPolicies})
	var ts []target
	for _, n := range orDefault(cfg.routingReplicas) {
		c := r.SharedTTFT(n)
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas, shared prefix: prefix p90 TTFT ≤ 0.25× round-robin's where round-robin's passes 2 s (issue 19)", n),
			known: c.Known, met: c.Met, measured: c.Measured})
		ratio, c := r.KneeRatio(n, routing.Shared, "prefix", "round-robin")
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas, shared prefix: throughput at the knee ≥ 1.8× round-robin's (issue 19)", n),
			known: c.Known, met: ratio >= 1.8, measured: c.Measured})
		ratio, c = r.KneeRatio(n, routing.Distinct, "prefix", "least-loaded")
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas, no sharing: prefix within ±5%% of least-loaded at the knee (issue 19)", n),
			known: c.Known, met: c.Known && ratio > 0 && math.Abs(ratio-1) <= 0.05, measured: c.Measured})
		tt, hits := r.FleetVsOne(n)
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas, shared prefix: %d routers behind Nginx, p90 TTFT ≤ 1.2× one router's (issue 29)", n, routing.FleetSize),
			known: tt.Known, met: tt.Met, measured: tt.Measured})
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas, shared prefix: %d routers behind Nginx, prefix-cache hit rate within 5 points of one router's (issue 29)", n, routing.FleetSize),
			known: hits.Known, met: hits.Met, measured: hits.Measured})
		fc := r.FlowVsPrefix(n)
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas, shared prefix: prefix p90 TTFT with flow control on within 1.1× of without (issue 28)", n),
			known: fc.Known, met: fc.Met, measured: fc.Measured})
		lost, p99 := r.RestartFigures(n)
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas: rolling restart of %d routers behind Nginx, requests failed 0 (issue 29)", n, routing.FleetSize),
			known: lost.Known, met: lost.Met, measured: lost.Measured})
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas: rolling restart, p99 TTFT during it ≤ 2× steady (issue 29)", n),
			known: p99.Known, met: p99.Met, measured: p99.Measured})
		c = r.PreloadedP99(n)
		ts = append(ts, target{goal: fmt.Sprintf("%d replicas, one pre-loaded: prefix p99 TTFT ≤ 0.5× round-robin's (issue 19)", n),
			known: c.Known, met: c.Met, measured: c.Measured})
	}
	for i := range ts {
		if !ts[i].known && ts[i].measured == "" {
			ts[i].measured = "its workload or policies were left out of this run"
		}
	}
	ok, sent := r.Success("prefix")
	ts = append(ts, target{goal: "prefix policy: 100% success, every step (issue 19)", known: sent > 0, met: sent > 0 && ok == sent,
		measured: fmt.Sprintf("%d of %d served", ok, sent)})
	return r.Markdown, ts, err
}

func orDefault(ns []int) []int {
	if len(ns) == 0 {
		return []int{2, 4}
	}
	return ns
}
