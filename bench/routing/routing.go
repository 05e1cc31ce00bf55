// Package routing measures the router's replica policies side by side:
// one model served by 2 and 4 enginesim replicas (prefill cost and prefix
// caching on, sized so that the engines saturate, not the router), every
// policy behind its own router over the same engines, and three workloads
// with Poisson arrivals at rising rates:
//
//   - shared: many tenants, each with a long system prompt of its own, and
//     short questions (prefix-cache affinity pays);
//   - distinct: prompts that share nothing (affinity cannot help; load
//     balance is all);
//   - preloaded: one replica's slots held by long requests sent to it
//     directly, short distinct prompts through the router (load awareness
//     pays).
//
// Each step reports p50/p90/p99 time to first token, throughput, the
// engines' prefix-cache hit rate and success; the knee is the highest rate
// whose p90 TTFT stays within 2 s with every request served.
package routing

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/cluster"
	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/nginx"
	"github.com/fe64bb06/frontdoor/internal/nginxconf"
	"github.com/fe64bb06/frontdoor/mentat/serve/stats"
)

// Config is one run.
type Config struct {
	// BinDir holds mentatd, mentatd-serve and enginesim; WorkDir receives
	// the logs.
	BinDir, WorkDir string
	// ServerCPUs pins the cluster (engines, daemon, agents, routers).
	ServerCPUs string
	// Duration of each rate step (default 5 s).
	Duration time.Duration
	// Replicas are the cluster sizes (default 2 and 4).
	Replicas []int
	// Workloads and Policies select what runs (default: all, in the
	// order of Workloads and Policies below whatever order they are
	// given in). Only the selected policies' routers are started.
	Workloads, Policies []string
}

// Workloads lists every workload, in the order they run.
var Workloads = []string{Shared, Distinct, Preloaded}

// selected returns the names of all that sel lists, in all's order (all
// of them when sel is empty), or an error naming an unknown one.
func selected(what string, all, sel []string) ([]string, error) {
	if len(sel) == 0 {
		return all, nil
	}
	for _, s := range sel {
		if !slices.Contains(all, s) {
			return nil, fmt.Errorf("unknown %s %q; want some of %s", what, s, strings.Join(all, ","))
		}
	}
	var out []string
	for _, a := range all {
		if slices.Contains(sel, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// Policies are compared in this order; round-robin is the baseline.
// Fleet is not a ROUTING_POLICY but the prefix policy on FleetSize
// routers behind Nginx, and runs on the shared workload only.
var Policies = []string{"prefix", "least-loaded", "round-robin", "session", "first", Fleet, PrefixFlow}

// PrefixFlow is not a ROUTING_POLICY either but the prefix policy on a
// router with flow control on (FLOW_CONTROL=on, defaults otherwise), on
// the shared workload only: against prefix it shows what holding
// requests in the router costs routing quality.
const PrefixFlow = "prefix-flow"

// Fleet is FleetSize routers (prefix policy) behind Nginx round-robin,
// configured by the sample the manual shows (conf/nginx/mentat-routers.conf).
//
// FleetScrape is the fleet's ROUTING_SCRAPE_S, as the manual advises for
// several routers: each router sees the others' requests only in the
// engines' numbers, and at 0.5 s those lag enough (some 5 requests per
// replica at 32 req/s) to push affinity past its threshold, spill
// prefixes and thrash the caches; one router sees its own live.
const (
	Fleet       = "fleet"
	FleetSize   = 3
	FleetScrape = "0.1"
)

// routerPolicy is the ROUTING_POLICY of a curve's routers.
func routerPolicy(p string) string {
	if p == Fleet || p == PrefixFlow {
		return "prefix"
	}
	return p
}

// sharedOnly reports whether policy p runs on the shared workload alone.
func sharedOnly(p string) bool { return p == Fleet || p == PrefixFlow }

// Workloads.
const (
	Shared    = "shared"
	Distinct  = "distinct"
	Preloaded = "preloaded"
)

// The engines: 16 slots, a prefill lane at 200 µs per uncached token, 20
// ms per generated token, and a KV cache of 16,384 tokens, which holds
// about ten of the 1,500-token tenant prompts: a replica that sees every
// tenant (round-robin) keeps evicting them, one that sees its share
// (affinity) keeps them.
var engineFlags = []string{"--max-num-seqs", "16", "--prefill-per-token", "200us", "--ttft", "20ms", "--itl", "20ms",
	"--jitter", "0", "--kv-cache-tokens", "16384", "--max-waiting", "100000", "--shutdown-timeout", "1s"}

const (
	model         = "routing-sim"
	tenantsPerRep = 8    // tenants per replica in the shared workload
	systemWords   = 1500 // tokens of a tenant's system prompt (one word, one token)
	distinctWords = 1500 // tokens of a distinct prompt
	preloadWords  = 200  // tokens of a preloaded-workload prompt
	maxTokens     = 32   // generated per request
	preloadTokens = 1500 // generated by each long preloading request (30 s)
	// requestTimeout bounds one request: past it the request counts as
	// failed, and the step's drain ends.
	requestTimeout = 60 * time.Second
	// kneeP90 is the latency bound of the knee.
	kneeP90 = 2 * time.Second
	// stopP90 ends a policy's ladder: past it, higher rates only queue.
	stopP90 = 4 * time.Second
)

// ratesPerReplica is the arrival ladder, in requests per second per
// replica, per workload.
//
// From 6 per replica up on the shared workload, where every policy's knee
// lies, the steps are 14% apart (TestSharedLadderSteps holds them under
// 15%), so that a comparison at a knee (a ±5% verdict, flow control's
// 1.1×) is not decided by a 50% jump.
var ratesPerReplica = map[string][]float64{
	Shared:    {1, 2, 4, 6, 6.8, 7.8, 8.9, 10.1, 11.5, 13.1, 14.9, 17, 19.4, 22.1, 25.2, 28.7, 32.7},
	Distinct:  {0.5, 1, 1.5, 2, 3, 4, 6, 8},
	Preloaded: {1, 2, 4},
}

// Step is one rate of one policy.
type Step struct {
	Rate float64 // offered, requests/s
	// Throughput is the requests served per second of the step (the
	// goodput: the offered rate times the share served). Counted over the
	// nominal step, not the measured arrival window, whose length varies
	// by ±1/√n with Poisson arrivals and would swamp a ±5% comparison.
	Throughput    float64
	P50, P90, P99 time.Duration
	HitRate       float64 // engines' prefix-cache hits / queries
	Sent, OK      int
	// Failures counts the failed requests by what the client saw.
	Failures map[string]int
	// Spills counts the step's fallback decisions (a prompt some replica
	// holds sent elsewhere by load, a cold prefill), for the sustained
	// steps only.
	Spills int
}

func (s Step) success() float64 {
	if s.Sent == 0 {
		return 0
	}
	return float64(s.OK) / float64(s.Sent)
}

// Curve is one policy's ladder on one workload and cluster size.
type Curve struct {
	Replicas int
	Workload string
	Policy   string
	Steps    []Step
	// Decisions counts the curve's routing decisions (every step) by
	// replica (group) and reason, from its router's
	// mentat_serve_routing_decisions_total.
	Decisions map[string]map[string]float64
	// Restart is the fleet's rolling restart (nil for other curves).
	Restart *Restart
	// Sustained is the fleet's sustained comparison with one router (nil
	// for other curves, or without a prefix curve with a knee).
	Sustained *Sustained
}

// Sustained compares the fleet with one prefix router at a rate both
// sustain: sustainedShare of one router's knee, or, when one router's p90
// there passes sustainedP90 (its queue grew through the step) or it
// fails a request, sustainedBackoff of that, up to sustainedTries rates.
// Each step is a warm-up (sustainedWarmup at 95% of the rate: the same
// tenants, other questions) and a measured step (sustainedWindow); once
// one router sustains a rate, the fleet runs it, with the same arrivals
// and texts in the measured step.
//
// The knee of a ladder of 5-s steps is not a rate either sustains: it is
// where queues start to grow, and over 5 s they have not grown far. Its
// p90 swings from run to run of one policy by more than the 1.2× the
// fleet is held to (one router's, at 59.6 req/s over 4 replicas: 0.69 s in
// one run, 1.42 s in the next), and at 0.8× of it a 30-s step queued
// without bound for both (2 replicas, 35.4 req/s: p90 10.0 s for one
// router, 5.4 s for the fleet). Half of it is usually sustained, but the
// knee itself moves between runs (59.6 to 77.6 req/s on 4 replicas), and
// half of a high one was past what one router sustains (38.8 req/s: p90
// 1.11 s), so the rate is checked before the fleet is judged at it. At a
// sustained rate p90 is a property of the routing (how many requests miss
// the cache and wait for a prefill) rather than of where in its growth a
// queue was cut off.
type Sustained struct {
	Rate       float64
	One, Fleet Step
	// Above holds one router's measured steps at the higher rates it did
	// not sustain, highest first.
	Above []Step
}

// Sustained reports whether one router sustained a rate, and so the
// fleet ran it.
func (su *Sustained) Sustained() bool { return su.One.Sent > 0 }

// sustainedShare, sustainedP90, sustainedBackoff, sustainedTries,
// sustainedWarmup and sustainedWindow set the sustained comparison
// (Sustained).
const (
	sustainedShare   = 0.5
	sustainedP90     = 500 * time.Millisecond
	sustainedBackoff = 0.8
	sustainedTries   = 3
	sustainedWarmup  = 10 * time.Second
	sustainedWindow  = 30 * time.Second
)

// Restart is a rolling restart of the fleet's routers (SIGTERM, wait for
// the exit, start again on the port, wait for /readyz) under a steady
// rate, against the same rate without one: the same arrivals, texts and
// caches.
type Restart struct {
	Steady, During Step
	// Took is from the first SIGTERM to the last router ready again.
	Took time.Duration
}

// restartRatePerReplica is the rolling restart's rate, in requests/s per
// replica: busy, but below every policy's knee.
const restartRatePerReplica = 8

// restartWindow is how long each of the two steps of a rolling restart
// offers its rate: longer than restarting FleetSize routers, each draining
// for SERVE_DRAIN_S (5 s).
const restartWindow = 30 * time.Second

// Knee is the step with the highest rate whose p90 TTFT is within 2 s and
// every request served; ok is false when no step is.
func (c Curve) Knee() (Step, bool) {
	var best Step
	ok := false
	for _, s := range c.Steps {
		if s.OK == s.Sent && s.Sent > 0 && s.P90 <= kneeP90 {
			best, ok = s, true
		}
	}
	return best, ok
}

// At is the step at rate, if the ladder reached it.
func (c Curve) At(rate float64) (Step, bool) {
	for _, s := range c.Steps {
		if s.Rate == rate {
			return s, true
		}
	}
	return Step{}, false
}

// Result is the section and every curve.
type Result struct {
	Markdown string
	Curves   []Curve
}

// Curve finds one curve.
func (r Result) Curve(replicas int, workload, policy string) (Curve, bool) {
	for _, c := range r.Curves {
		if c.Replicas == replicas && c.Workload == workload && c.Policy == policy {
			return c, true
		}
	}
	return Curve{}, false
}

// Run measures every cluster size, workload and policy.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if len(cfg.Replicas) == 0 {
		cfg.Replicas = []int{2, 4}
	}
	var err error
	if cfg.Workloads, err = selected("workload", Workloads, cfg.Workloads); err != nil {
		return Result{}, err
	}
	if cfg.Policies, err = selected("policy", Policies, cfg.Policies); err != nil {
		return Result{}, err
	}
	var res Result
	for _, n := range cfg.Replicas {
		curves, err := runCluster(ctx, cfg, n)
		res.Curves = append(res.Curves, curves...)
		if err != nil {
			res.Markdown = markdown(cfg, res)
			return res, fmt.Errorf("%d replicas: %w", n, err)
		}
	}
	res.Markdown = markdown(cfg, res)
	return res, nil
}

// bench is one cluster with a router per policy.
type bench struct {
	c       *cluster.Cluster
	routers map[string]string // policy → router URL (the fleet's: its Nginx)
	fleet   []string          // the fleet's router URLs
	// fleetProcs are the fleet's routers now; fleetStart starts router i
	// again on its port.
	fleetProcs []*harness.Proc
	fleetStart func(i int) (*harness.Proc, error)
	engines    []string // engine base URLs (no /v1)
	n          int
	client     *http.Client
}

func runCluster(ctx context.Context, cfg Config, n int) ([]Curve, error) {
	var engines []cluster.Engine
	for i := range n {
		engines = append(engines, cluster.Engine{Group: fmt.Sprintf("replica-%d", i), Model: model, Flags: engineFlags})
	}
	logDir := fmt.Sprintf("%s/replicas-%d", cfg.WorkDir, n)
	if err := mkdir(logDir); err != nil {
		return nil, err
	}
	c, err := cluster.Start(ctx, cluster.Opts{BinDir: cfg.BinDir, LogDir: logDir, CPUs: cfg.ServerCPUs, Engines: engines,
		RouterEnv: []string{"ROUTING_POLICY=" + routerPolicy(cfg.Policies[0]), "ROUTING_SCRAPE_S=0.5"}})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	var stops []func()
	b := &bench{c: c, n: n, routers: map[string]string{cfg.Policies[0]: c.RouterURL},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}}}
	defer b.client.CloseIdleConnections()
	for _, e := range engines {
		b.engines = append(b.engines, c.EngineURL(e.Group))
	}
	// One more router per policy over the same daemon (no UDP: the seed
	// finds the daemon), so every policy meets the same engines; the
	// fleet's routers behind their Nginx.
	startRouter := func(name, policy, scrape string, port int, extra ...string) (*harness.Proc, int, error) {
		if port == 0 {
			var err error
			if port, err = harness.FreePort(); err != nil {
				return nil, 0, err
			}
		}
		env := append([]string{"SERVE_PORT=" + strconv.Itoa(port), "MENTAT_ANNOUNCE_PORT=0", "ROUTING_POLICY=" + policy, "ROUTING_SCRAPE_S=" + scrape}, extra...)
		for _, kv := range c.RouterEnvUsed {
			if strings.HasPrefix(kv, "MENTAT_DAEMONS=") || strings.HasPrefix(kv, "POLL_INTERVAL_S=") || strings.HasPrefix(kv, "PROBE_INTERVAL_S=") {
				env = append(env, kv)
			}
		}
		r, err := harness.Start(logDir, harness.Spec{Name: name, Bin: cfg.BinDir + "/mentatd-serve", CPUs: cfg.ServerCPUs, Env: env})
		return r, port, err
	}
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		for _, p := range b.fleetProcs {
			p.Stop()
		}
	}()
	for _, p := range cfg.Policies[1:] {
		if p != Fleet {
			var extra []string
			if p == PrefixFlow {
				extra = []string{"FLOW_CONTROL=on"}
			}
			r, port, err := startRouter("mentatd-serve-"+p, routerPolicy(p), "0.5", 0, extra...)
			if err != nil {
				return nil, err
			}
			stops = append(stops, r.Stop)
			b.routers[p] = "http://127.0.0.1:" + strconv.Itoa(port)
			continue
		}
		var ports []int
		// Each fleet router saves its prefix index when it stops, and the
		// one restarted in its place reads it (docs/mentatd-serve.md,
		// "Running several routers").
		indexFile := func(i int) string {
			return fmt.Sprintf("ROUTING_INDEX_FILE=%s/fleet-%d.index.json", logDir, i)
		}
		for i := range FleetSize {
			r, port, err := startRouter(fmt.Sprintf("mentatd-serve-fleet-%d", i), routerPolicy(p), FleetScrape, 0, indexFile(i))
			if err != nil {
				return nil, err
			}
			b.fleetProcs = append(b.fleetProcs, r)
			b.fleet, ports = append(b.fleet, "http://127.0.0.1:"+strconv.Itoa(port)), append(ports, port)
		}
		restarts := 0
		b.fleetStart = func(i int) (*harness.Proc, error) {
			restarts++
			r, _, err := startRouter(fmt.Sprintf("mentatd-serve-fleet-%d-restart-%d", i, restarts), routerPolicy(p), FleetScrape, ports[i], indexFile(i))
			return r, err
		}
		sample, err := nginxconf.Read(nginxconf.RoutersSample)
		if err != nil {
			return nil, err
		}
		ng, err := nginx.StartSample(ctx, logDir, cfg.ServerCPUs, "fleet", sample, ports)
		if err != nil {
			return nil, fmt.Errorf("nginx: %w", err)
		}
		stops = append(stops, ng.Stop)
		b.routers[p] = ng.URL("fleet")
	}
	for _, p := range cfg.Policies {
		for _, url := range b.routersOf(p) {
			if err := harness.Eventually(ctx, cluster.StartTimeout, p+" router: every replica ready", func() error { return b.ready(url) }); err != nil {
				return nil, err
			}
		}
	}

	var curves []Curve
	for _, w := range cfg.Workloads {
		for _, p := range cfg.Policies {
			if sharedOnly(p) && w != Shared {
				continue
			}
			cv := Curve{Replicas: n, Workload: w, Policy: p}
			// The texts are the same for every policy (so is any choice
			// made by hashing them); a cache_salt per curve keeps any
			// policy from finding a cache another warmed.
			text, cacheSalt := fmt.Sprintf("%s-%d", w, n), cacheSaltOf(w, p, n)
			before, err := b.decisions(p)
			if err != nil {
				return curves, err
			}
			for _, perRep := range ratesPerReplica[w] {
				if ctx.Err() != nil {
					return curves, ctx.Err()
				}
				st, err := b.step(ctx, cfg, w, p, text, cacheSalt, perRep*float64(n))
				if err != nil {
					return append(curves, cv), err
				}
				cv.Steps = append(cv.Steps, st)
				fmt.Fprintf(os.Stderr, "routing: %d replicas, %s, %s, %.1f req/s: p90 %ss, %d/%d served, hit %.0f%%%s\n",
					n, w, p, st.Rate, secs(st.P90), st.OK, st.Sent, 100*st.HitRate, failuresText(st.Failures))
				if st.P90 > stopP90 || st.OK < st.Sent {
					break
				}
			}
			after, err := b.decisions(p)
			if err != nil {
				return append(curves, cv), err
			}
			cv.Decisions = diffDecisions(after, before)
			fmt.Fprintf(os.Stderr, "routing: %d replicas, %s, %s: decisions %s\n", n, w, p, decisionsText(cv.Decisions))
			if p == Fleet {
				rs, err := b.rollingRestart(ctx, cfg, text, cacheSalt)
				if err != nil {
					return append(curves, cv), fmt.Errorf("rolling restart: %w", err)
				}
				cv.Restart = &rs
				if one, ok := curveOf(curves, n, Shared, "prefix"); ok {
					if k, ok := one.Knee(); ok {
						su, err := b.sustained(ctx, cfg, text, k.Rate)
						if err != nil {
							return append(curves, cv), fmt.Errorf("sustained comparison: %w", err)
						}
						cv.Sustained = &su
					}
				}
			}
			curves = append(curves, cv)
		}
	}
	return curves, nil
}

// ready checks that a router lists n ready replicas of the model.
func (b *bench) ready(url string) error {
	var doc struct {
		Models map[string]struct {
			Replicas []struct {
				State string `json:"state"`
			} `json:"replicas"`
		} `json:"models"`
	}
	resp, err := b.client.Get(url + "/status.json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return err
	}
	reps := doc.Models[model].Replicas
	ready := 0
	for _, r := range reps {
		if r.State == "ready" {
			ready++
		}
	}
	if ready != b.n {
		return fmt.Errorf("%d of %d replicas ready", ready, b.n)
	}
	return nil
}

// words is n vocabulary words (one enginesim token each) seeded by key.
func words(key string, n int) string {
	vocab := []string{"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "at", "by"}
	r := rand.New(rand.NewPCG(hash(key), 7))
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(vocab[r.IntN(len(vocab))])
	}
	return sb.String()
}

func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

// prompt builds the i-th request body of a step; salt names the step, so
// no two requests of a curve are the same (tenants' system prompts are the
// curve's, shared by its steps).
// The session key (X-Session-ID, for the session policy) is the tenant,
// or unique per request when there is none.
func (b *bench) prompt(w, salt, cacheSalt string, i int, r *rand.Rand, tenants []string) (body []byte, session string) {
	var msgs []map[string]string
	session = fmt.Sprint(salt, "-", i)
	switch w {
	case Shared:
		t := r.IntN(len(tenants))
		session = fmt.Sprint("tenant-", t)
		msgs = []map[string]string{{"role": "system", "content": tenants[t]},
			{"role": "user", "content": fmt.Sprintf("question %d of %s: what is the status?", i, salt)}}
	case Distinct:
		msgs = []map[string]string{{"role": "user", "content": fmt.Sprintf("%s %d: %s", salt, i, words(fmt.Sprint(salt, i), distinctWords))}}
	default:
		msgs = []map[string]string{{"role": "user", "content": fmt.Sprintf("%s %d: %s", salt, i, words(fmt.Sprint(salt, i), preloadWords))}}
	}
	body, _ = json.Marshal(map[string]any{"model": model, "stream": true, "max_tokens": maxTokens, "ignore_eos": true, "messages": msgs, "cache_salt": cacheSalt})
	return body, session
}

// step offers rate requests/s for one Duration with Poisson arrivals and
// waits for every answer (each bounded by requestTimeout).
func (b *bench) step(ctx context.Context, cfg Config, w, policy, salt, cacheSalt string, rate float64) (Step, error) {
	url := b.routers[policy] + "/v1/chat/completions"
	var tenants []string
	for t := range tenantsPerRep * b.n {
		tenants = append(tenants, fmt.Sprintf("tenant %d of %s. ", t, salt)+words(fmt.Sprint(salt, "tenant", t), systemWords))
	}
	hits0, queries0, err := b.prefixCounters()
	if err != nil {
		return Step{}, err
	}
	stopPreload := func() {}
	if w == Preloaded {
		if stopPreload, err = b.preload(ctx); err != nil {
			return Step{}, err
		}
	}
	defer stopPreload()

	// The arrivals (and the shared workload's tenant picks) depend on the
	// workload, cluster size and rate, not on the policy: every policy
	// meets the same schedule, so a comparison at one rate is not also a
	// comparison of two random draws (at 72 requests a step, the p90 of
	// two Poisson schedules differs by tenths of a second on its own).
	r := rand.New(rand.NewPCG(hash(fmt.Sprintf("%s-%d", w, b.n)), uint64(rate*1000)))
	n := int(rate * cfg.Duration.Seconds())
	stepSalt := fmt.Sprintf("%s-at-%g", salt, rate)
	var mu sync.Mutex
	var ttfts []time.Duration
	ok := 0
	var failures map[string]int
	var wg sync.WaitGroup
	start := time.Now()
	at := time.Duration(0)
	for i := range n {
		body, session := b.prompt(w, stepSalt, cacheSalt, i, r, tenants)
		at += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return Step{}, ctx.Err()
			case <-time.After(d):
			}
		}
		wg.Go(func() {
			ttft, err := b.stream(ctx, url, body, session)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if failures == nil {
					failures = map[string]int{}
				}
				failures[err.Error()]++
				return
			}
			ok++
			ttfts = append(ttfts, ttft)
		})
	}
	wg.Wait()
	stopPreload()
	hits1, queries1, err := b.prefixCounters()
	if err != nil {
		return Step{}, err
	}
	st := Step{Rate: rate, Sent: n, OK: ok, Failures: failures}
	st.Throughput = float64(ok) / cfg.Duration.Seconds()
	if q := queries1 - queries0; q > 0 {
		st.HitRate = (hits1 - hits0) / q
	}
	slices.Sort(ttfts)
	// Failed requests count as infinitely slow in the percentiles.
	for range n - ok {
		ttfts = append(ttfts, requestTimeout)
	}
	st.P50, st.P90, st.P99 = harness.Pct(ttfts, 0.50), harness.Pct(ttfts, 0.90), harness.Pct(ttfts, 0.99)
	return st, nil
}

// stream sends one streaming request and returns the time to its first
// frame; it fails unless the stream ends with [DONE].
func (b *bench) stream(ctx context.Context, url string, body []byte, session string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	sent := time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		return 0, fmt.Errorf("HTTP %d %s", resp.StatusCode, e.Error.Code)
	}
	var ttft time.Duration
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if ttft == 0 {
			ttft = time.Since(sent)
		}
		if line == "data: [DONE]" {
			return ttft, nil
		}
		if strings.HasPrefix(line, `data: {"error"`) {
			return 0, errors.New("stream ended with an error event")
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("stream cut: %w", err)
	}
	return 0, errors.New("stream ended without [DONE]")
}

// preload fills replica 0's slots with long requests sent to its engine
// directly, and keeps them there until the returned stop is called.
func (b *bench) preload(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	body, _ := json.Marshal(map[string]any{"model": model, "stream": true, "max_tokens": preloadTokens, "ignore_eos": true,
		"messages": []map[string]string{{"role": "user", "content": "a long generation"}}})
	for range 16 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.engines[0]+"/v1/chat/completions", strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := b.client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	stop := sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
	// Start measuring once the engine runs them all.
	err := harness.Eventually(ctx, 20*time.Second, "replica 0 pre-loaded", func() error {
		run, err := metric(b.client, b.engines[0], "vllm:num_requests_running")
		if err == nil && run < 16 {
			err = fmt.Errorf("%v running", run)
		}
		return err
	})
	if err != nil {
		stop()
		return nil, err
	}
	// The routers see it within their scrape interval.
	time.Sleep(time.Second)
	return stop, nil
}

// prefixCounters sums every engine's prefix-cache hits and queries.
func (b *bench) prefixCounters() (hits, queries float64, err error) {
	for _, e := range b.engines {
		h, err := metric(b.client, e, "vllm:prefix_cache_hits_total")
		if err != nil {
			return 0, 0, err
		}
		q, err := metric(b.client, e, "vllm:prefix_cache_queries_total")
		if err != nil {
			return 0, 0, err
		}
		hits, queries = hits+h, queries+q
	}
	return hits, queries, nil
}

// cacheSaltOf is the cache_salt of a policy's requests on a workload: one
// per curve, so no policy finds a cache another warmed.
func cacheSaltOf(w, policy string, n int) string { return fmt.Sprintf("%s-%s-%d", w, policy, n) }

// curveOf finds a curve already measured.
func curveOf(curves []Curve, n int, w, policy string) (Curve, bool) {
	return Result{Curves: curves}.Curve(n, w, policy)
}

// sustained runs the Sustained comparison from sustainedShare of knee.
func (b *bench) sustained(ctx context.Context, cfg Config, text string, knee float64) (Sustained, error) {
	var su Sustained
	run := func(p string, rate float64) (Step, error) {
		cacheSalt := cacheSaltOf(Shared, p, b.n)
		warm := cfg
		warm.Duration = sustainedWarmup
		if _, err := b.step(ctx, warm, Shared, p, text, cacheSalt, math.Round(95*rate)/100); err != nil {
			return Step{}, err
		}
		meas := cfg
		meas.Duration = sustainedWindow
		before, err := b.decisions(p)
		if err != nil {
			return Step{}, err
		}
		st, err := b.step(ctx, meas, Shared, p, text, cacheSalt, rate)
		if err != nil {
			return st, err
		}
		after, err := b.decisions(p)
		if err != nil {
			return st, err
		}
		for _, rs := range diffDecisions(after, before) {
			st.Spills += int(rs["fallback"])
		}
		fmt.Fprintf(os.Stderr, "routing: sustained %.1f req/s for %v, %s: p90 %ss, %d/%d served, hit %.1f%%, %d spills%s\n",
			rate, sustainedWindow, p, secs(st.P90), st.OK, st.Sent, 100*st.HitRate, st.Spills, failuresText(st.Failures))
		return st, nil
	}
	rate := sustainedShare * knee
	for try := 1; ; try++ {
		su.Rate = math.Round(10*rate) / 10
		st, err := run("prefix", su.Rate)
		if err != nil {
			return su, err
		}
		if st.P90 <= sustainedP90 && st.OK == st.Sent {
			su.One = st
			break
		}
		su.Above = append(su.Above, st)
		if try == sustainedTries {
			return su, nil // no rate one router sustains: nothing to judge the fleet at
		}
		rate *= sustainedBackoff
	}
	st, err := run(Fleet, su.Rate)
	su.Fleet = st
	return su, err
}

// rollingRestart measures the fleet's rolling restart: a steady step, then
// the same step with every router restarted in turn during it.
func (b *bench) rollingRestart(ctx context.Context, cfg Config, text, cacheSalt string) (Restart, error) {
	cfg.Duration = restartWindow
	rate := float64(restartRatePerReplica * b.n)
	var rs Restart
	var err error
	if rs.Steady, err = b.step(ctx, cfg, Shared, Fleet, text, cacheSalt, rate); err != nil {
		return rs, err
	}
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		start := time.Now()
		for i := range b.fleetProcs {
			if err := b.restartRouter(ctx, i); err != nil {
				restarted <- err
				return
			}
		}
		rs.Took = time.Since(start)
		restarted <- nil
	}()
	rs.During, err = b.step(ctx, cfg, Shared, Fleet, text, cacheSalt, rate)
	if rerr := <-restarted; rerr != nil {
		return rs, rerr
	}
	fmt.Fprintf(os.Stderr, "routing: rolling restart of %d routers in %v at %.0f req/s: p99 %ss (steady %ss), %d/%d served%s\n",
		len(b.fleetProcs), rs.Took.Round(time.Millisecond), rate, secs(rs.During.P99), secs(rs.Steady.P99), rs.During.OK, rs.During.Sent, failuresText(rs.During.Failures))
	return rs, err
}

// restartRouter stops fleet router i with SIGTERM, checks that it exits 0
// within its drain and shutdown, starts it again and waits until its
// /readyz answers 200.
func (b *bench) restartRouter(ctx context.Context, i int) error {
	p := b.fleetProcs[i]
	if err := syscall.Kill(p.PID(), syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.Done():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s did not exit within 60 s of SIGTERM", p.Name)
	}
	if _, err := p.Exited(); err != nil {
		return fmt.Errorf("%s after SIGTERM: %v\n%s", p.Name, err, p.Tail())
	}
	np, err := b.fleetStart(i)
	if err != nil {
		return err
	}
	b.fleetProcs[i] = np
	return harness.Eventually(ctx, cluster.StartTimeout, np.Name+" ready", func() error {
		resp, err := b.client.Get(b.fleet[i] + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	}, np)
}

// routersOf is the URLs of a policy's routers.
func (b *bench) routersOf(policy string) []string {
	if policy == Fleet {
		return b.fleet
	}
	return []string{b.routers[policy]}
}

// decisions reads a policy's routers' routing decisions, summed: replica
// → reason → count.
func (b *bench) decisions(policy string) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	for _, url := range b.routersOf(policy) {
		if err := b.addDecisions(url, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// addDecisions adds one router's decisions to out.
func (b *bench) addDecisions(url string, out map[string]map[string]float64) error {
	fams, err := stats.FetchMetrics(context.Background(), b.client, url+"/metrics")
	if err != nil {
		return err
	}
	mf := fams["mentat_serve_routing_decisions_total"]
	if mf == nil {
		return nil
	}
	for _, m := range mf.GetMetric() {
		var rep, reason string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "replica":
				rep = l.GetValue()
			case "reason":
				reason = l.GetValue()
			}
		}
		if out[rep] == nil {
			out[rep] = map[string]float64{}
		}
		out[rep][reason] += m.GetCounter().GetValue()
	}
	return nil
}

// diffDecisions is after − before, leaving out zero counts.
func diffDecisions(after, before map[string]map[string]float64) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for rep, rs := range after {
		for reason, v := range rs {
			if d := v - before[rep][reason]; d != 0 {
				if out[rep] == nil {
					out[rep] = map[string]float64{}
				}
				out[rep][reason] = d
			}
		}
	}
	return out
}

// decisionsText renders decisions as "replica-0 40 (load 38, fallback
// 2), replica-1 …", replicas and reasons in name order.
func decisionsText(d map[string]map[string]float64) string {
	reps := slices.Sorted(maps.Keys(d))
	parts := make([]string, 0, len(reps))
	for _, rep := range reps {
		total := 0.0
		var rs []string
		for _, reason := range slices.Sorted(maps.Keys(d[rep])) {
			total += d[rep][reason]
			rs = append(rs, fmt.Sprintf("%s %.0f", reason, d[rep][reason]))
		}
		parts = append(parts, fmt.Sprintf("%s %.0f (%s)", rep, total, strings.Join(rs, ", ")))
	}
	return strings.Join(parts, ", ")
}

// spread is the requests each replica got over the curve, replicas in
// name order ("40/38/41/39"), every replica of the cluster listed.
func spread(n int, d map[string]map[string]float64) string {
	parts := make([]string, n)
	for i := range n {
		total := 0.0
		for _, v := range d[fmt.Sprintf("replica-%d", i)] {
			total += v
		}
		parts[i] = fmt.Sprintf("%.0f", total)
	}
	return strings.Join(parts, "/")
}

// metric sums every series of name on an engine's /metrics.
func metric(c *http.Client, base, name string) (float64, error) {
	fams, err := stats.FetchMetrics(context.Background(), c, base+"/metrics")
	return fams.Total(name), err
}

// failuresText lists failures by what the client saw, most first ("" for
// none).
func failuresText(f map[string]int) string {
	if len(f) == 0 {
		return ""
	}
	kinds := slices.Collect(maps.Keys(f))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(f[b], f[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d × %s", f[k], k)
	}
	return "; failed: " + strings.Join(parts, ", ")
}
