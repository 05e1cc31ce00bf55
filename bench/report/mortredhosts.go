package main

import (
	"context"
	"fmt"

	"github.com/fe64bb06/frontdoor/bench/internal/compare"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/mortredhosts"
)

// The goals of issue 30 in the targets table.
const (
	goalEdge     = "TLS edge in front of one gateway, against the gateway direct (issue 30)"
	goalFails    = "rollout under load fails 0 requests (issue 30)"
	goalSwitch   = "p99 during the switch ≤ 2× steady (issue 30)"
	goalTwoHosts = "two hosts against one (issue 30)"
)

func runMortredHosts(ctx context.Context, cfg config) (string, []target, error) {
	dir, err := workDir(cfg, "mortredhosts")
	if err != nil {
		return "", nil, err
	}
	r, err := mortredhosts.Run(ctx, mortredhosts.Config{BinDir: cfg.binDir, Root: cfg.root, WorkDir: dir,
		ServerCPUs: cfg.serverCPUs, LoadCPUs: cfg.loadCPUs, Duration: cfg.d, Rounds: cfg.rounds})
	return r.Markdown, mortredHostsTargets(r), err
}

// mortredHostsTargets is one target per figure of issue 30; a part that
// was not measured leaves its targets "not measured".
func mortredHostsTargets(r mortredhosts.Result) []target {
	ts := []target{{goal: goalEdge, info: true}, {goal: goalFails}, {goal: goalSwitch}, {goal: goalTwoHosts, info: true}}
	if r.EdgeErr == nil {
		e := r.Edge
		ts[0].known = true
		ts[0].measured = fmt.Sprintf("%.2f× the gateway's req/s at %d connections; %s ms added p50 at 1 connection (%.2f×); TLS termination included",
			e.Throughput, e.Conns, compare.SignedMs(e.AddedP50), e.P50Ratio)
	}
	if r.RolloutErr == nil {
		o := r.Rollout
		ts[1].known, ts[1].met = true, o.Failed == 0
		ts[1].measured = fmt.Sprintf("%d of %d failed (%.0f req/s; the rollout took %.1f s)", o.Failed, o.Requests, o.Rate, o.Took.Seconds())
		ts[2].known, ts[2].met = true, o.Ratio > 0 && o.Ratio <= 2
		ts[2].measured = fmt.Sprintf("%.2f× (p99 %s ms over %d requests in the switch window, %s ms over %d steady)",
			o.Ratio, harness.Ms(o.SwitchP99), o.SwitchN, harness.Ms(o.SteadyP99), o.SteadyN)
	}
	switch h := r.Hosts; {
	case r.HostsErr != nil:
	case h.NotMeasured != "":
		ts[3].measured = h.NotMeasured
	default:
		ts[3].known = true
		ts[3].measured = fmt.Sprintf("%.2f× one host's req/s at %d connections through the edge, h1 answering %.0f%% "+
			"(both hosts share this machine's CPUs: the second adds a model worker, not CPU, so this shows the edge's overhead and balance, not scaling)",
			h.Ratio, h.Conns, 100*h.Share)
	}
	return ts
}
