package routing

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

func mkdir(d string) error { return os.MkdirAll(d, 0o755) }

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

// markdown renders the section: the setup, then per cluster size and
// workload a knee summary and every step.
func markdown(cfg Config, r Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "One model served by %v enginesim replicas (each: `%s`), every policy behind its own `mentatd-serve` "+
		"over the same engines (`ROUTING_POLICY`, `ROUTING_SCRAPE_S=0.5`, the rest default), all on the server CPUs. "+
		"Each step offers Poisson arrivals for %s at the rate shown, every request a stream of %d tokens "+
		"(`ignore_eos`); TTFT is the time to the first frame at the client, a failed request counts as %s. "+
		"A policy's ladder stops after the first step whose p90 passes %s or that fails a request. "+
		"Goodput is the requests served per second of the step; the knee is the highest rate whose p90 TTFT is within %s "+
		"with every request served, and the throughput there is its goodput.\n\n",
		cfg.Replicas, strings.Join(engineFlags, " "), cfg.Duration, maxTokens, requestTimeout, stopP90, kneeP90)
	fmt.Fprintf(&b, "Workloads: **shared**, %d tenants per replica, each with its own %d-token system prompt, picked at random, "+
		"and a short question; **distinct**, %d-token prompts that share nothing; **preloaded**, %d-token distinct prompts while "+
		"replica 0's 16 slots are held by %d-token generations sent to its engine directly (not through the router). "+
		"Every request carries `X-Session-ID` (the tenant in the shared workload, unique otherwise) for the session policy. "+
		"Hit rate is the engines' own prefix-cache hits over queries (tokens) during the step; the texts are the same for every policy (so is any choice made by hashing them), "+
		"and each policy's requests carry their own `cache_salt`, so no policy finds a cache another warmed; the arrival times (and the shared workload's tenant picks) "+
		"are the same for every policy at a given rate. Requests per replica are the router's routing decisions "+
		"(`mentat_serve_routing_decisions_total`) over the policy's whole ladder, replica 0 first.\n\n",
		tenantsPerRep, systemWords, distinctWords, preloadWords, preloadTokens)
	if slices.Contains(cfg.Policies, Fleet) {
		fmt.Fprintf(&b, "**fleet** is %d routers with the prefix policy and `ROUTING_SCRAPE_S=%s` over the same engines behind one Nginx "+
			"(round-robin, the sample `conf/nginx/mentat-routers.conf` as the manual shows it, on the server CPUs), "+
			"on the shared workload only; its decisions are the routers' summed. Against **prefix** (one router) it shows "+
			"what routers that share no index lose, and what Nginx adds.\n\n", FleetSize, FleetScrape)
	}
	if slices.Contains(cfg.Policies, PrefixFlow) {
		b.WriteString("**prefix-flow** is one router with the prefix policy and flow control on (`FLOW_CONTROL=on`, every other " +
			"flow variable at its default), on the shared workload only: against **prefix** it shows what holding requests " +
			"in the router while the engines are saturated costs routing quality.\n\n")
	}
	for _, n := range cfg.Replicas {
		for _, w := range cfg.Workloads {
			var knees, steps [][]string
			for _, p := range cfg.Policies {
				c, ok := r.Curve(n, w, p)
				if !ok {
					continue
				}
				if k, ok := c.Knee(); ok {
					knees = append(knees, []string{p, fmt.Sprintf("%.1f", k.Rate), fmt.Sprintf("%.1f", k.Throughput), secs(k.P90), fmt.Sprintf("%.0f%%", 100*k.HitRate), spread(n, c.Decisions)})
				} else {
					knees = append(knees, []string{p, "none", "–", "–", "–", spread(n, c.Decisions)})
				}
				for _, s := range c.Steps {
					steps = append(steps, []string{p, fmt.Sprintf("%.1f", s.Rate), fmt.Sprintf("%.1f", s.Throughput),
						secs(s.P50), secs(s.P90), secs(s.P99), fmt.Sprintf("%.0f%%", 100*s.HitRate),
						fmt.Sprintf("%d/%d (%.1f%%)", s.OK, s.Sent, 100*s.success())})
				}
			}
			if len(steps) == 0 {
				continue
			}
			fmt.Fprintf(&b, "### %d replicas, %s\n\n", n, w)
			b.WriteString(harness.Table([]string{"policy", "knee (req/s offered)", "throughput at the knee (req/s)", "p90 TTFT there (s)", "hit rate there", "requests per replica (whole ladder)"}, knees, true) + "\n")
			b.WriteString(harness.Table([]string{"policy", "offered req/s", "goodput req/s", "p50 TTFT (s)", "p90 (s)", "p99 (s)", "prefix hit rate", "success"}, steps, true) + "\n")
			if c, ok := r.Curve(n, w, Fleet); ok && c.Restart != nil {
				rs := c.Restart
				fmt.Fprintf(&b, "Rolling restart of the fleet: for each router in turn, `SIGTERM`, its exit (it drains for `SERVE_DRAIN_S`, 5 s, "+
					"then finishes what it carries and saves its prefix index to its `ROUTING_INDEX_FILE`), a new router on its port, reading that file, and its `/readyz` 200; "+
					"%d routers in %s, during a %s step at %.0f req/s, "+
					"against the same step (same arrivals, texts and caches) without a restart:\n\n",
					FleetSize, secs(rs.Took), restartWindow, rs.Steady.Rate)
				row := func(name string, s Step) []string {
					return []string{name, secs(s.P50), secs(s.P90), secs(s.P99), fmt.Sprintf("%.0f%%", 100*s.HitRate), fmt.Sprintf("%d/%d", s.OK, s.Sent)}
				}
				b.WriteString(harness.Table([]string{"", "p50 TTFT (s)", "p90 (s)", "p99 (s)", "prefix hit rate", "served whole"},
					[][]string{row("steady", rs.Steady), row("rolling restart", rs.During)}, true) + "\n")
				for _, s := range []struct {
					name string
					st   Step
				}{{"steady", rs.Steady}, {"during the restart", rs.During}} {
					if f := failuresText(s.st.Failures); f != "" {
						fmt.Fprintf(&b, "Failed %s: %s.\n\n", s.name, strings.TrimPrefix(f, "; failed: "))
					}
				}
			}
			if c, ok := r.Curve(n, w, Fleet); ok && c.Sustained != nil {
				su := c.Sustained
				row := func(name string, s Step) []string {
					return []string{name, fmt.Sprintf("%.1f", s.Rate), secs(s.P50), secs(s.P90), secs(s.P99), fmt.Sprintf("%.1f%%", 100*s.HitRate), fmt.Sprint(s.Spills), fmt.Sprintf("%d/%d", s.OK, s.Sent)}
				}
				fmt.Fprintf(&b, "Sustained comparison: one prefix router, then the fleet, each a %s warm-up at 95%% of the rate and a measured %s step, "+
					"the two measured steps with the same arrivals and texts. The rate starts at %.0f%% of one router's knee and steps down by %.0f%% "+
					"(at most %d rates) while one router's p90 there passes %s s or a request fails. "+
					"A spill is a prompt some replica holds sent to another by load: a cold prefill there, which every request behind it waits for, "+
					"and, in a full KV cache, another prompt's blocks evicted:\n\n",
					sustainedWarmup, sustainedWindow, 100*sustainedShare, 100*(1-sustainedBackoff), sustainedTries, secs(sustainedP90))
				var rows [][]string
				for _, s := range su.Above {
					rows = append(rows, row("one router (not sustained)", s))
				}
				if su.Sustained() {
					rows = append(rows, row("one router", su.One), row(fmt.Sprintf("%d routers behind Nginx", FleetSize), su.Fleet))
				}
				b.WriteString(harness.Table([]string{"", "req/s", "p50 TTFT (s)", "p90 (s)", "p99 (s)", "prefix hit rate", "spills (fallback decisions)", "served whole"}, rows, true) + "\n")
			}
		}
	}
	return b.String()
}

// Comparison is one target's figures: the policy's against the baseline.
type Comparison struct {
	Known    bool
	Measured string
	Met      bool
}

// SharedTTFT compares prefix's p90 TTFT with round-robin's at the first
// rate where round-robin's p90 passes 2 s (target: ≤ 0.25×).
func (r Result) SharedTTFT(n int) Comparison {
	rr, ok1 := r.Curve(n, Shared, "round-robin")
	px, ok2 := r.Curve(n, Shared, "prefix")
	if !ok1 || !ok2 {
		return Comparison{}
	}
	for _, s := range rr.Steps {
		if s.P90 > kneeP90 {
			p, ok := px.At(s.Rate)
			if !ok {
				return Comparison{Known: true, Measured: fmt.Sprintf("prefix stopped below %.1f req/s, where round-robin's p90 is %ss", s.Rate, secs(s.P90))}
			}
			ratio := p.P90.Seconds() / s.P90.Seconds()
			return Comparison{Known: true, Met: ratio <= 0.25,
				Measured: fmt.Sprintf("%.2f× (%ss vs %ss at %.1f req/s)", ratio, secs(p.P90), secs(s.P90), s.Rate)}
		}
	}
	return Comparison{Known: true, Measured: "round-robin's p90 stayed within 2 s at every rate offered"}
}

// FleetVsOne compares the fleet (FleetSize prefix routers behind Nginx)
// with one prefix router on the shared workload, at the sustained rate
// (Sustained): the p90 ratio (target ≤ 1.2×) and the hit rates (target
// within 5 points). The ratio at the ladder's knee step (atPrefixKnee) is
// given beside it.
func (r Result) FleetVsOne(n int) (ttft, hits Comparison) {
	s, f, found, ok := r.atPrefixKnee(n, Fleet)
	if !found {
		return Comparison{}, Comparison{}
	}
	atKnee := "no knee step where both ran within the knee bound"
	if ok {
		atKnee = fmt.Sprintf("at the ladder's knee step, %.1f req/s: %.2f× (%ss vs %ss), %+.1f points", s.Rate,
			f.P90.Seconds()/s.P90.Seconds(), secs(f.P90), secs(s.P90), 100*(f.HitRate-s.HitRate))
	}
	cv, _ := r.Curve(n, Shared, Fleet)
	su := cv.Sustained
	switch {
	case su == nil:
		return Comparison{Known: true, Measured: "no sustained comparison (" + atKnee + ")"}, Comparison{Known: true, Measured: "no sustained comparison"}
	case !su.Sustained():
		why := fmt.Sprintf("one router sustained none of %d rates down to %.1f req/s (%s)", len(su.Above), su.Rate, atKnee)
		return Comparison{Known: true, Measured: why}, Comparison{Known: true, Measured: why}
	}
	share := "?"
	if one, ok := r.Curve(n, Shared, "prefix"); ok {
		if k, ok := one.Knee(); ok {
			share = fmt.Sprintf("%.0f%%", 100*su.Rate/k.Rate)
		}
	}
	ratio := su.Fleet.P90.Seconds() / su.One.P90.Seconds()
	diff := 100 * (su.Fleet.HitRate - su.One.HitRate)
	return Comparison{Known: true, Met: ratio <= 1.2 && su.Fleet.OK == su.Fleet.Sent,
			Measured: fmt.Sprintf("%.2f× (%ss vs %ss over %s at %.1f req/s, %s of one router's knee, %d/%d served; %s)",
				ratio, secs(su.Fleet.P90), secs(su.One.P90), sustainedWindow, su.Rate, share, su.Fleet.OK, su.Fleet.Sent, atKnee)},
		Comparison{Known: true, Met: math.Abs(diff) <= 5,
			Measured: fmt.Sprintf("%+.1f points (%.0f%% vs %.0f%% over %s at %.1f req/s)", diff, 100*su.Fleet.HitRate, 100*su.One.HitRate, sustainedWindow, su.Rate)}
}

// FlowVsPrefix compares prefix-flow (one prefix router with flow control
// on) with prefix on the shared workload, at the knee step
// (atPrefixKnee): the p90 ratio (target ≤ 1.1×).
func (r Result) FlowVsPrefix(n int) Comparison {
	s, f, found, ok := r.atPrefixKnee(n, PrefixFlow)
	if !found {
		return Comparison{}
	}
	if !ok {
		return Comparison{Known: true, Measured: noKnee}
	}
	ratio := f.P90.Seconds() / s.P90.Seconds()
	return Comparison{Known: true, Met: ratio <= 1.1 && f.OK == f.Sent,
		Measured: fmt.Sprintf("%.2f× (%ss vs %ss at %.1f req/s, %d/%d served, hit rate %.0f%% vs %.0f%%)",
			ratio, secs(f.P90), secs(s.P90), s.Rate, f.OK, f.Sent, 100*f.HitRate, 100*s.HitRate)}
}

const noKnee = "no rate where both ran within the knee bound"

// atPrefixKnee finds, on the shared workload, the highest rate at which
// both prefix and policy ran and prefix served every request with its
// p90 TTFT within the knee bound, and returns both steps there. found is
// false when either curve is missing, ok when such a rate exists.
func (r Result) atPrefixKnee(n int, policy string) (prefix, other Step, found, ok bool) {
	one, ok1 := r.Curve(n, Shared, "prefix")
	cv, ok2 := r.Curve(n, Shared, policy)
	if !ok1 || !ok2 {
		return Step{}, Step{}, false, false
	}
	for i := len(one.Steps) - 1; i >= 0; i-- {
		s := one.Steps[i]
		f, ok := cv.At(s.Rate)
		if ok && s.P90 <= kneeP90 && s.OK == s.Sent {
			return s, f, true, true
		}
	}
	return Step{}, Step{}, true, false
}

// RestartFigures are the rolling restart's targets: no request failed
// (target 0) and p99 TTFT during it against steady (target ≤ 2×).
func (r Result) RestartFigures(n int) (failed, p99 Comparison) {
	c, ok := r.Curve(n, Shared, Fleet)
	if !ok || c.Restart == nil {
		return Comparison{}, Comparison{}
	}
	rs := c.Restart
	lost := rs.During.Sent - rs.During.OK
	ratio := rs.During.P99.Seconds() / rs.Steady.P99.Seconds()
	return Comparison{Known: true, Met: lost == 0, Measured: fmt.Sprintf("%d of %d (restart took %ss)", lost, rs.During.Sent, secs(rs.Took))},
		Comparison{Known: true, Met: ratio <= 2, Measured: fmt.Sprintf("%.2f× (%ss vs %ss at %.0f req/s)", ratio, secs(rs.During.P99), secs(rs.Steady.P99), rs.Steady.Rate)}
}

// KneeRatio compares the throughput at the knee of policy with base's on
// workload w.
func (r Result) KneeRatio(n int, w, policy, base string) (float64, Comparison) {
	a, ok1 := r.Curve(n, w, policy)
	b, ok2 := r.Curve(n, w, base)
	if !ok1 || !ok2 {
		return 0, Comparison{}
	}
	ka, okA := a.Knee()
	kb, okB := b.Knee()
	switch {
	case !okA:
		return 0, Comparison{Known: true, Measured: policy + " has no knee (its lowest rate already missed)"}
	case !okB:
		return 0, Comparison{Known: true, Measured: fmt.Sprintf("%s has no knee; %s's is %.1f req/s", base, policy, ka.Throughput)}
	}
	ratio := ka.Throughput / kb.Throughput
	bound := ""
	if last := a.Steps[len(a.Steps)-1]; last.Rate == ka.Rate {
		// The ladder ended below the policy's knee: a lower bound.
		bound = "≥ "
	}
	return ratio, Comparison{Known: true, Measured: fmt.Sprintf("%s%.2f× (%.1f vs %.1f req/s)", bound, ratio, ka.Throughput, kb.Throughput)}
}

// PreloadedP99 compares prefix's p99 TTFT with round-robin's on the
// preloaded workload at the highest rate both ran (target: ≤ 0.5×).
func (r Result) PreloadedP99(n int) Comparison {
	rr, ok1 := r.Curve(n, Preloaded, "round-robin")
	px, ok2 := r.Curve(n, Preloaded, "prefix")
	if !ok1 || !ok2 {
		return Comparison{}
	}
	for i := len(rr.Steps) - 1; i >= 0; i-- {
		s := rr.Steps[i]
		if p, ok := px.At(s.Rate); ok {
			ratio := p.P99.Seconds() / s.P99.Seconds()
			return Comparison{Known: true, Met: ratio <= 0.5,
				Measured: fmt.Sprintf("%.2f× (%ss vs %ss at %.1f req/s)", ratio, secs(p.P99), secs(s.P99), s.Rate)}
		}
	}
	return Comparison{}
}

// Success is how many of policy's requests were served, over every step
// of every workload and cluster size, overload steps included.
func (r Result) Success(policy string) (ok, sent int) {
	for _, c := range r.Curves {
		if c.Policy != policy {
			continue
		}
		for _, s := range c.Steps {
			ok, sent = ok+s.OK, sent+s.Sent
		}
	}
	return ok, sent
}
