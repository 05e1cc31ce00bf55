package balance

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// replicas builds n routes for model "m" in groups g0..g(n-1), probed at
// probed.
func replicas(t *testing.T, n int, probed time.Time) []*routes.Route {
	t.Helper()
	out := make([]*routes.Route, n)
	for i := range out {
		rt, err := routes.NewRoute("m", fmt.Sprintf("g%d", i), fmt.Sprintf("http://127.0.0.1:%d/v1", 9000+i), "")
		if err != nil {
			t.Fatal(err)
		}
		rt.Probed = probed
		out[i] = rt
	}
	return out
}

// fixture is a Balancer on a fixed clock whose replicas all report an
// idle engine just now.
type fixture struct {
	b    *Balancer
	reps []*routes.Route
	now  time.Time
	reg  *prometheus.Registry
}

func newFixture(t *testing.T, p Policy, n int) *fixture {
	t.Helper()
	f := &fixture{now: time.Unix(1_700_000_000, 0), reg: prometheus.NewRegistry()}
	f.b = New(Config{Policy: p}, f.reg)
	f.b.now = func() time.Time { return f.now }
	f.reps = replicas(t, n, f.now.Add(-time.Second))
	for _, rt := range f.reps {
		f.b.Observe(rt.Group, EngineLoad{At: f.now, OK: true})
	}
	return f
}

// stale ages every engine's numbers past belief, so that Threshold on
// the router's own in-flight counts decides: with fresh numbers a holder
// is judged by what its engine has queued (TestHolderKeepsPrefixWhileQueueIsShort).
func (f *fixture) stale() { f.now = f.now.Add(time.Minute) }

func keys(text string) []uint64 {
	b := GetBlocks()
	defer PutBlocks(b)
	b.Write([]byte(text))
	return append([]uint64(nil), b.Keys()...)
}

// heldByBoth sends req to both replicas of a two-replica fixture, first
// to the one the policy picks for it (its home), and returns that one and
// the other.
func (f *fixture) heldByBoth(req Request) (home, other *routes.Route) {
	home = f.b.Choose(f.reps, req).Order[0]
	other = f.reps[0]
	if other == home {
		other = f.reps[1]
	}
	f.b.Start(req, home, Home, 0).End()
	f.b.Start(req, other, Fallback, 0).End()
	return home, other
}

// send routes one request and starts it on the first replica, returning
// the ticket (not ended: the request stays in flight).
func (f *fixture) send(req Request) (Decision, *Ticket) {
	req.Model = "m"
	d := f.b.Choose(f.reps, req)
	return d, f.b.Start(req, d.Order[0], d.Reason, d.Matched)
}

func TestParsePolicy(t *testing.T) {
	for _, p := range Policies {
		got, err := ParsePolicy(" " + strings.ToUpper(string(p)) + " ")
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %q, %v", p, got, err)
		}
	}
	if _, err := ParsePolicy("random"); err == nil || !strings.Contains(err.Error(), "prefix, least-loaded, round-robin, session, first") {
		t.Errorf("ParsePolicy(random) error = %v, want the list of policies", err)
	}
}

func TestDistinctPromptsSpread(t *testing.T) {
	for _, p := range []Policy{Prefix, LeastLoaded} {
		t.Run(string(p), func(t *testing.T) {
			f := newFixture(t, p, 4)
			count := map[string]int{}
			for i := range 400 {
				d, tk := f.send(Request{Keys: keys(fmt.Sprintf("user: question number %d about something else", i))})
				count[d.Order[0].Group]++
				want := Load
				if p == Prefix {
					want = Home // new to the router: its rendezvous replica
				}
				if d.Reason != want {
					t.Fatalf("request %d: reason %s, want %s (nothing shared)", i, d.Reason, want)
				}
				tk.End() // idle again: only the hash spreads them
			}
			for _, rt := range f.reps {
				if c := count[rt.Group]; c < 50 {
					t.Errorf("replica %s got %d of 400 distinct prompts; want them spread (%v)", rt.Group, c, count)
				}
			}
		})
	}
}

func TestLeastLoadedFollowsInflight(t *testing.T) {
	f := newFixture(t, LeastLoaded, 3)
	count := map[string]int{}
	for range 30 {
		d, _ := f.send(Request{}) // never ended
		count[d.Order[0].Group]++
	}
	for _, rt := range f.reps {
		if count[rt.Group] != 10 {
			t.Errorf("30 concurrent requests over 3 replicas: %v, want 10 each", count)
		}
	}
}

func TestSharedPrefixSticksThenSpills(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	f.stale()
	system := "system: " + strings.Repeat("you are a careful assistant for tenant one. ", 40)
	first, _ := f.send(Request{Keys: keys(system + "user: q0")})
	warm := first.Order[0].Group
	// The warm replica takes the prefix until it carries Threshold more
	// than the idle one (its load 1..Threshold against 0), then the next
	// spills.
	for i := 1; i <= DefaultThreshold; i++ {
		d, _ := f.send(Request{Keys: keys(system + fmt.Sprintf("user: q%d", i))})
		if d.Order[0].Group != warm || d.Reason != Affinity {
			t.Fatalf("request %d went to %s (%s), want %s by affinity", i, d.Order[0].Group, d.Reason, warm)
		}
		if want := len(keys(system)) - 1; d.Matched < want {
			t.Fatalf("request %d matched %d blocks, want at least %d", i, d.Matched, want)
		}
	}
	d, _ := f.send(Request{Keys: keys(system + "user: spill")})
	if d.Order[0].Group == warm || d.Reason != Fallback {
		t.Fatalf("request past the threshold went to %s (%s), want the other replica as fallback", d.Order[0].Group, d.Reason)
	}
	// Both hold the prefix now; the first holder is back within
	// Threshold of the other (Threshold+1 against 1), so it takes it:
	// the spilled copy is not kept warm.
	d, _ = f.send(Request{Keys: keys(system + "user: after")})
	if d.Order[0].Group != warm || d.Reason != Affinity {
		t.Fatalf("after the spill: %s (%s), want %s, the first holder, by affinity", d.Order[0].Group, d.Reason, warm)
	}
	hit := value(f.b.m.blocks.WithLabelValues("m", "hit"))
	miss := value(f.b.m.blocks.WithLabelValues("m", "miss"))
	// Threshold+3 prompts of 7 blocks (6 full of system prompt, then the
	// rest of it with the question): the first and the spill miss all 7,
	// the other Threshold+1 hit 6 and miss the last.
	if wantHit, wantMiss := float64((DefaultThreshold+1)*6), float64(2*7+DefaultThreshold+1); hit != wantHit || miss != wantMiss {
		t.Errorf("prefix blocks hit=%v miss=%v; want %v and %v", hit, miss, wantHit, wantMiss)
	}
	if got := value(f.b.m.decisions.WithLabelValues("m", warm, "affinity")); got != DefaultThreshold+1 {
		t.Errorf("affinity decisions for %s = %v, want %d", warm, got, DefaultThreshold+1)
	}
}

func TestThresholdIsConfigurable(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	f.stale()
	f.b.cfg.Threshold = 2
	system := strings.Repeat("shared system prompt ", 50)
	first, _ := f.send(Request{Keys: keys(system + "0")})
	for i := 1; i <= 2; i++ {
		if d, _ := f.send(Request{Keys: keys(system + fmt.Sprint(i))}); d.Order[0] != first.Order[0] {
			t.Fatalf("request %d left the warm replica before the threshold of 2", i)
		}
	}
	if d, _ := f.send(Request{Keys: keys(system + "3")}); d.Order[0] == first.Order[0] {
		t.Fatal("request 3 stayed on the warm replica past the threshold of 2")
	}
}

func TestPreloadedReplicaAvoided(t *testing.T) {
	for _, p := range []Policy{Prefix, LeastLoaded, Session} {
		t.Run(string(p), func(t *testing.T) {
			f := newFixture(t, p, 2)
			system := strings.Repeat("tenant prompt ", 100)
			// Warm g0 with the prefix, then load it behind the router's
			// back: its engine reports 20 running and a queue longer
			// than Threshold.
			req := Request{Keys: keys(system + "x")}
			f.b.Start(Request{Model: "m", Keys: req.Keys}, f.reps[0], Load, 0).End()
			f.b.Observe("g0", EngineLoad{Running: 20, Waiting: DefaultThreshold + 3, At: f.now, OK: true})
			for i := range 20 {
				d, tk := f.send(Request{Keys: keys(system + fmt.Sprint(i)), Session: fmt.Sprint("s", i)})
				if d.Order[0].Group != "g1" {
					t.Fatalf("request %d went to the pre-loaded replica (%s)", i, d.Reason)
				}
				tk.End()
			}
			// Drained: it takes work again (distinct prompts, so neither
			// replica has affinity).
			f.b.Observe("g0", EngineLoad{At: f.now, OK: true})
			seen := false
			for i := range 20 {
				d, tk := f.send(Request{Keys: keys(fmt.Sprint(i, system)), Session: fmt.Sprint("s", i)})
				seen = seen || d.Order[0].Group == "g0"
				tk.End()
			}
			if !seen {
				t.Error("the drained replica got no work")
			}
		})
	}
}

func TestWaitingAndKVWeigh(t *testing.T) {
	f := newFixture(t, LeastLoaded, 2)
	// g0: 4 running + 3 waiting = 10; g1: 9 running = 9.
	f.b.Observe("g0", EngineLoad{Running: 4, Waiting: 3, At: f.now, OK: true})
	f.b.Observe("g1", EngineLoad{Running: 9, At: f.now, OK: true})
	if d := f.b.Choose(f.reps, Request{Model: "m"}); d.Order[0].Group != "g1" {
		t.Errorf("waiting requests should weigh double: chose %s", d.Order[0].Group)
	}
	f.b.Observe("g1", EngineLoad{Running: 3, KV: 0.99, HasKV: true, At: f.now, OK: true})
	if d := f.b.Choose(f.reps, Request{Model: "m"}); d.Order[0].Group != "g0" {
		t.Errorf("a full KV cache should add the threshold: chose %s", d.Order[0].Group)
	}
	// Requests the router had in flight at the scrape are not counted
	// twice: g0's engine ran 5, 3 of them the router's, which now has 1.
	f.b.Observe("g0", EngineLoad{Running: 5, Own: 3, At: f.now, OK: true})
	tk := f.b.Start(Request{Model: "m"}, f.reps[0], Load, 0)
	if info := f.b.Info(f.reps[0]); info.Load != 1+2 {
		t.Errorf("g0 load %v, want 1 in flight + 2 from other clients", info.Load)
	}
	tk.End()
	// The router's own count wins when the scrape is behind it.
	f.b.Observe("g0", EngineLoad{At: f.now, OK: true})
	f.b.Observe("g1", EngineLoad{At: f.now, OK: true})
	for range 3 {
		f.b.Start(Request{Model: "m"}, f.reps[0], Load, 0)
	}
	if info := f.b.Info(f.reps[0]); info.Load != 3 || info.Inflight != 3 || info.State != "ready" {
		t.Errorf("g0 info = %+v, want ready with load 3 from 3 in flight", info)
	}
}

func TestStaleLoadIsBusy(t *testing.T) {
	for _, p := range []Policy{Prefix, LeastLoaded, Session} {
		t.Run(string(p), func(t *testing.T) {
			f := newFixture(t, p, 2)
			f.b.Observe("g0", EngineLoad{At: f.now.Add(-time.Minute), OK: true})
			for i := range 10 {
				d, _ := f.send(Request{Keys: keys(fmt.Sprint("prompt ", i)), Session: fmt.Sprint(i)})
				if d.Order[0].Group != "g1" {
					t.Fatalf("request %d went to the replica with stale numbers", i)
				}
			}
			if s := f.b.Info(f.reps[0]).State; s != "stale" {
				t.Errorf("state = %q, want stale", s)
			}
			f.b.Observe("g1", EngineLoad{At: f.now, OK: false}) // a failed scrape is stale too
			if s := f.b.Info(f.reps[1]).State; s != "stale" {
				t.Errorf("state after a failed scrape = %q, want stale", s)
			}
		})
	}
}

func TestAllStaleStillRoutesByAffinity(t *testing.T) {
	// Engines that publish no /metrics: every replica is stale, so the
	// policy compares the router's own counts and affinity still holds.
	f := newFixture(t, Prefix, 2)
	for _, rt := range f.reps {
		f.b.Observe(rt.Group, EngineLoad{})
	}
	system := strings.Repeat("no metrics here ", 40)
	first, _ := f.send(Request{Keys: keys(system + "a")})
	d, _ := f.send(Request{Keys: keys(system + "b")})
	if d.Order[0] != first.Order[0] || d.Reason != Affinity {
		t.Errorf("second request: %s (%s), want %s by affinity", d.Order[0].Group, d.Reason, first.Order[0].Group)
	}
}

func TestRefusedReplicaSkippedUntilProbe(t *testing.T) {
	for _, p := range Policies {
		t.Run(string(p), func(t *testing.T) {
			f := newFixture(t, p, 3)
			f.b.Refuse("m", f.reps[0])
			for i := range 12 {
				d, tk := f.send(Request{Keys: keys(fmt.Sprint("p", i)), Session: fmt.Sprint(i)})
				if d.Order[0].Group == "g0" || d.Order[2].Group != "g0" {
					t.Fatalf("request %d: order %s, %s, %s; want the refused g0 last", i, d.Order[0].Group, d.Order[1].Group, d.Order[2].Group)
				}
				tk.End()
			}
			if s := f.b.Info(f.reps[0]).State; s != "refused" {
				t.Errorf("state = %q, want refused", s)
			}
			// A probe that started before the refusal does not clear it;
			// one that succeeded after does.
			f.reps[0].Probed = f.now.Add(-time.Millisecond)
			if s := f.b.Info(f.reps[0]).State; s != "refused" {
				t.Errorf("state after an older probe = %q, want refused", s)
			}
			f.now = f.now.Add(time.Second)
			f.reps[0].Probed = f.now
			f.b.Observe("g0", EngineLoad{At: f.now, OK: true})
			f.b.Observe("g1", EngineLoad{At: f.now, OK: true})
			f.b.Observe("g2", EngineLoad{At: f.now, OK: true})
			if s := f.b.Info(f.reps[0]).State; s != "ready" {
				t.Errorf("state after a good probe = %q, want ready", s)
			}
			if got := value(f.b.m.refusals.WithLabelValues("m", "g0")); got != 1 {
				t.Errorf("refusals = %v, want 1", got)
			}
		})
	}
}

func TestFirstKeepsFirstGroup(t *testing.T) {
	f := newFixture(t, First, 3)
	for i := range 20 {
		d, _ := f.send(Request{Keys: keys(fmt.Sprint(i))}) // load never ends
		if d.Order[0].Group != "g0" || d.Reason != Order {
			t.Fatalf("request %d: %s (%s), want g0 always", i, d.Order[0].Group, d.Reason)
		}
	}
}

func TestRoundRobinRotates(t *testing.T) {
	f := newFixture(t, RoundRobin, 3)
	f.b.Observe("g1", EngineLoad{Running: 100, At: f.now, OK: true}) // ignored
	var got []string
	for range 6 {
		d, _ := f.send(Request{})
		got = append(got, d.Order[0].Group)
	}
	if s := strings.Join(got, ","); s != "g1,g2,g0,g1,g2,g0" {
		t.Errorf("round-robin order %s", s)
	}
}

func TestSessionStableAcrossRestarts(t *testing.T) {
	pick := func(b *Balancer, reps []*routes.Route, s string) string {
		return b.Choose(reps, Request{Model: "m", Session: s}).Order[0].Group
	}
	f1 := newFixture(t, Session, 4)
	f2 := newFixture(t, Session, 4) // a new process: nothing shared but the hash
	count := map[string]int{}
	for i := range 200 {
		s := fmt.Sprint("session-", i)
		a, b := pick(f1.b, f1.reps, s), pick(f2.b, f2.reps, s)
		if a != b {
			t.Fatalf("session %s: %s in one balancer, %s in the other", s, a, b)
		}
		if d := f1.b.Choose(f1.reps, Request{Model: "m", Session: s}); d.Reason != Affinity {
			t.Fatalf("session %s reason %s, want affinity", s, d.Reason)
		}
		count[a]++
	}
	for _, rt := range f1.reps {
		if count[rt.Group] < 25 {
			t.Errorf("sessions spread %v; want each replica to get some", count)
		}
	}
	// A session's replica saturated: the next by the same hash takes it,
	// the same one each time.
	s := "session-7"
	home := pick(f1.b, f1.reps, s)
	for _, rt := range f1.reps {
		if rt.Group == home {
			f1.b.Observe(home, EngineLoad{Running: 50, At: f1.now, OK: true})
		}
	}
	d := f1.b.Choose(f1.reps, Request{Model: "m", Session: s})
	if d.Order[0].Group == home || d.Reason != Fallback {
		t.Fatalf("saturated session replica: chose %s (%s)", d.Order[0].Group, d.Reason)
	}
	if again := pick(f1.b, f1.reps, s); again != d.Order[0].Group {
		t.Errorf("fallback not stable: %s then %s", d.Order[0].Group, again)
	}
	// Removing another replica moves no session that did not rank it first.
	var without []*routes.Route
	for _, rt := range f2.reps {
		if rt.Group != "g3" {
			without = append(without, rt)
		}
	}
	for i := range 200 {
		s := fmt.Sprint("session-", i)
		if a := pick(f2.b, f2.reps, s); a != "g3" && pick(f2.b, without, s) != a {
			t.Fatalf("session %s moved off %s when g3 left", s, a)
		}
	}
}

func TestSessionWithoutKeyGoesByLoad(t *testing.T) {
	f := newFixture(t, Session, 2)
	f.b.Observe("g0", EngineLoad{Running: 3, At: f.now, OK: true})
	if d := f.b.Choose(f.reps, Request{Model: "m"}); d.Order[0].Group != "g1" || d.Reason != Load {
		t.Errorf("no session key: %s (%s), want g1 by load", d.Order[0].Group, d.Reason)
	}
}

func TestTicketEndOnce(t *testing.T) {
	f := newFixture(t, LeastLoaded, 1)
	_, tk := f.send(Request{})
	tk.End()
	tk.End()
	if n := f.b.Info(f.reps[0]).Inflight; n != 0 {
		t.Errorf("in flight after two Ends = %d, want 0", n)
	}
}

func TestWatchObservesAndForgets(t *testing.T) {
	f := newFixture(t, LeastLoaded, 2)
	var h routes.Holder
	h.Store(routes.NewReplicated(f.now, map[string][]*routes.Route{"m": {f.reps[1]}}, nil, nil))
	f.b.Start(Request{Model: "m"}, f.reps[0], Load, 0) // g0 keeps a request: kept
	f.b.watchRound(context.Background(), h.Load(), func(_ context.Context, rt *routes.Route) EngineLoad {
		return EngineLoad{Running: 7, At: f.now, OK: true}
	})
	if info := f.b.Info(f.reps[1]); info.Load != 7 {
		t.Errorf("g1 load after a round = %v, want 7", info.Load)
	}
	if _, ok := f.b.replicas.Load("g0"); !ok {
		t.Error("g0 forgotten while a request to it runs")
	}
	f.b.replica("g2")
	f.b.watchRound(context.Background(), h.Load(), func(context.Context, *routes.Route) EngineLoad { return EngineLoad{} })
	if _, ok := f.b.replicas.Load("g2"); ok {
		t.Error("g2 (not in the snapshot, nothing in flight) kept")
	}
}

// value reads one counter or gauge child.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func TestWatchRunsUntilCancelled(t *testing.T) {
	b := New(Config{Policy: LeastLoaded, ScrapeInterval: time.Millisecond}, nil)
	rt := replicas(t, 1, time.Now())[0]
	var h routes.Holder
	h.Store(routes.NewReplicated(time.Now(), map[string][]*routes.Route{"m": {rt}}, nil, nil))
	ctx, cancel := context.WithCancel(context.Background())
	rounds := make(chan struct{}, 100)
	done := make(chan struct{})
	var after atomic.Int64
	go func() {
		defer close(done)
		b.Watch(ctx, &h, func(context.Context, *routes.Route) EngineLoad {
			select {
			case rounds <- struct{}{}:
			default: // the test stopped counting
			}
			return EngineLoad{Running: 2, At: time.Now(), OK: true}
		}, func() { after.Add(1) })
	}()
	for range 3 {
		<-rounds
	}
	cancel()
	<-done
	if n := after.Load(); n < 2 {
		t.Errorf("the after-round func ran %d times over 3 rounds", n)
	}
	if info := b.Info(rt); info.State != "ready" || info.Load != 2 {
		t.Errorf("after the rounds: %+v", info)
	}
}

// TestConcurrentUse runs choices, starts, ends and engine readings at once
// (under -race): every ticket ended leaves nothing in flight.
func TestConcurrentUse(t *testing.T) {
	for _, p := range Policies {
		f := newFixture(t, p, 3)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 200 {
					req := Request{Model: "m", Keys: keys(fmt.Sprintf("tenant %d %s", i%5, strings.Repeat("x", 600))), Session: fmt.Sprint(w, i%7)}
					d := f.b.Choose(f.reps, req)
					tk := f.b.Start(req, d.Order[0], d.Reason, d.Matched)
					if i%17 == 0 {
						f.b.Refuse("m", d.Order[0])
					}
					tk.End()
				}
			})
		}
		wg.Go(func() {
			for i := range 200 {
				f.b.Observe(fmt.Sprint("g", i%3), EngineLoad{Running: float64(i % 4), At: f.now, OK: true})
				f.b.Info(f.reps[i%3])
			}
		})
		wg.Wait()
		for _, rt := range f.reps {
			if n := f.b.Info(rt).Inflight; n != 0 {
				t.Errorf("%s: %s has %d in flight after every ticket ended", p, rt.Group, n)
			}
		}
	}
}

// Prompts that share nothing, or only a common header (a chat template
// and a short system prompt, one block, ahead of text of their own), are
// new to the router: each goes to its home replica unless that carries
// more than HomeSlack above the least loaded, so the prefix policy never
// strays further than that from what least-loaded would choose.
func TestPrefixWithoutAffinityStaysNearLeastLoaded(t *testing.T) {
	header := "system" + strings.Repeat(" you are a helpful assistant.", 10) // one block and a bit
	for _, tc := range []struct{ name, header string }{{"nothing shared", ""}, {"common header", header}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Prefix, 4)
			var open []*Ticket
			reasons := map[Reason]int{}
			for i := range 400 {
				req := Request{Model: "m", Keys: keys(tc.header + fmt.Sprintf("user %d: %s", i, strings.Repeat(fmt.Sprint(" words of prompt ", i), 60)))}
				least := math.Inf(1)
				for _, rt := range f.reps {
					least = min(least, f.b.Info(rt).Load)
				}
				d := f.b.Choose(f.reps, req)
				if got := f.b.Info(d.Order[0]).Load; got > least+HomeSlack {
					t.Fatalf("request %d went to %s with load %v, least %v: more than HomeSlack (%d) above", i, d.Order[0].Group, got, least, HomeSlack)
				}
				reasons[d.Reason]++
				open = append(open, f.b.Start(req, d.Order[0], d.Reason, d.Matched))
				// Requests end out of order, some stay in flight, and
				// the engines report other clients' work now and then.
				if i%3 == 2 {
					open[(i*7)%len(open)].End()
				}
				if i%50 == 49 {
					for j, rt := range f.reps {
						f.b.Observe(rt.Group, EngineLoad{Running: float64((i + j) % 5), Waiting: float64(j % 2), At: f.now, OK: true})
					}
				}
			}
			if reasons[Home] == 0 || reasons[Load] == 0 || reasons[Affinity]+reasons[Fallback] != 0 {
				t.Errorf("reasons %v: want home while the home replica is near the least loaded, load past it, and no affinity", reasons)
			}
		})
	}
}

// A common header gives no replica a claim: concurrent requests that
// share only it spread over the replicas, none more than HomeSlack+1
// ahead of another.
func TestCommonHeaderSpreads(t *testing.T) {
	f := newFixture(t, Prefix, 4)
	header := "system" + strings.Repeat(" you are a helpful assistant.", 20)
	count := map[string]int{}
	for i := range 40 {
		d, _ := f.send(Request{Keys: keys(header + fmt.Sprintf("user %d: ", i) + strings.Repeat("a question of its own. ", 60))}) // never ended
		count[d.Order[0].Group]++
		if d.Reason != Home && d.Reason != Load {
			t.Errorf("request %d: reason %s, want home or load (a shared header is no affinity)", i, d.Reason)
		}
	}
	lo, hi := 40, 0
	for _, rt := range f.reps {
		lo, hi = min(lo, count[rt.Group]), max(hi, count[rt.Group])
	}
	if hi-lo > HomeSlack+1 {
		t.Fatalf("40 concurrent requests sharing only a header over 4 replicas: %v, want none more than %d ahead", count, HomeSlack+1)
	}
}

// Routers share no index, yet two routers whose load figures differ a
// little (each counts its own requests live, the other's only from the
// engines' scrapes) send the first request of each new prefix to the
// same replica, and then follow their own indexes there, so each
// prefix is cached once, not once per router. A home past the slack is
// passed over for the least loaded.
func TestRoutersAgreeOnNewPrefixes(t *testing.T) {
	a, b := newFixture(t, Prefix, 4), newFixture(t, Prefix, 4)
	// a carries two requests of its own, b one: their load figures
	// differ, by less than HomeSlack.
	a.send(Request{})
	a.send(Request{})
	b.send(Request{})
	homes := map[string]int{}
	for tenant := range 40 {
		system := fmt.Sprintf("tenant %d: ", tenant) + strings.Repeat(fmt.Sprintf("the policies and documents of tenant %d. ", tenant), 80)
		da := a.b.Choose(a.reps, Request{Model: "m", Keys: keys(system + "user: first question")})
		db := b.b.Choose(b.reps, Request{Model: "m", Keys: keys(system + "user: another question")})
		if da.Order[0].Group != db.Order[0].Group || da.Reason != Home || db.Reason != Home {
			t.Fatalf("tenant %d: router a chose %s (%s), router b %s (%s); want the same home replica", tenant, da.Order[0].Group, da.Reason, db.Order[0].Group, db.Reason)
		}
		homes[da.Order[0].Group]++
		// Both start and end it; the next request of the tenant on each
		// router follows its own index to the same replica.
		a.b.Start(Request{Model: "m", Keys: keys(system + "user: first question")}, da.Order[0], da.Reason, da.Matched).End()
		b.b.Start(Request{Model: "m", Keys: keys(system + "user: another question")}, db.Order[0], db.Reason, db.Matched).End()
		na := a.b.Choose(a.reps, Request{Model: "m", Keys: keys(system + "user: third")})
		nb := b.b.Choose(b.reps, Request{Model: "m", Keys: keys(system + "user: fourth")})
		if na.Order[0].Group != da.Order[0].Group || nb.Order[0].Group != da.Order[0].Group || na.Reason != Affinity || nb.Reason != Affinity {
			t.Fatalf("tenant %d again: a %s (%s), b %s (%s); want %s by affinity on both", tenant, na.Order[0].Group, na.Reason, nb.Order[0].Group, nb.Reason, da.Order[0].Group)
		}
	}
	if len(homes) != 4 {
		t.Errorf("40 tenants' homes: %v, want all 4 replicas used", homes)
	}

	// A home more than HomeSlack above the least loaded is passed over.
	f := newFixture(t, Prefix, 2)
	system := strings.Repeat("a long document nobody sent before. ", 80)
	home := f.b.Choose(f.reps, Request{Model: "m", Keys: keys(system)}).Order[0]
	for range HomeSlack + 1 {
		f.b.Start(Request{Model: "m"}, home, Load, 0)
	}
	if d := f.b.Choose(f.reps, Request{Model: "m", Keys: keys(system)}); d.Order[0] == home || d.Reason != Load {
		t.Errorf("home %s carrying %d more: chose %s (%s), want the other replica by load", home.Group, HomeSlack+1, d.Order[0].Group, d.Reason)
	}
}

// The router's own requests queued at a scrape leave the scraped queue as
// they end: the engine takes a waiting request in for each that finishes,
// so they are not counted twice (live and scraped) until the next scrape.
func TestOwnQueuedNotCountedTwice(t *testing.T) {
	f := newFixture(t, LeastLoaded, 1)
	rt := f.reps[0]
	var tickets []*Ticket
	for range 6 {
		_, tk := f.send(Request{Model: "m"})
		tickets = append(tickets, tk)
	}
	// The engine runs 4 of the router's 6 and queues 2.
	st := f.b.replica(rt.Group)
	f.b.Observe(rt.Group, EngineLoad{Running: 4, Waiting: 2, At: f.now, OK: true, Own: 6, Ended: st.ended.Load()})
	if got := f.b.Info(rt).Load; got != 8 {
		t.Fatalf("load %v at the scrape, want 6 in flight + the queue of 2", got)
	}
	tickets[0].End()
	tickets[1].End()
	// Two ended, so the engine took its two waiting in: 4 in flight, none queued.
	if got := f.b.Info(rt).Load; got != 4 {
		t.Errorf("load %v after two ended, want 4 (the queue is gone, not still counted)", got)
	}
	for _, tk := range tickets[2:] {
		tk.End()
	}
}

// Free: nothing known is no limit; an engine that queues has no room and
// teaches its capacity; below it, room is the capacity less the router's
// and the engine's other work; the capacity grows back when the engine
// runs at it with nobody waiting; a configured cap wins; a refused
// replica has no room.
func TestFree(t *testing.T) {
	f := newFixture(t, LeastLoaded, 2)
	a, b := f.reps[0], f.reps[1]
	if got := f.b.Free(f.reps); got != unlimited {
		t.Fatalf("idle engines, capacity unknown: free %d, want unlimited", got)
	}
	f.b.Observe(a.Group, EngineLoad{Running: 8, Waiting: 3, At: f.now, OK: true})
	f.b.Observe(b.Group, EngineLoad{Running: 2, Waiting: 1, At: f.now, OK: true})
	if got := f.b.Free(f.reps); got != 0 {
		t.Fatalf("both queueing: free %d, want 0", got)
	}
	if f.b.Capacity(a.Group) != 8 || f.b.Capacity(b.Group) != 2 {
		t.Fatalf("learned %d and %d, want 8 and 2", f.b.Capacity(a.Group), f.b.Capacity(b.Group))
	}
	// A scrape between one request's end and the next one's start sees a
	// slot free beside the queue: the capacity stays.
	f.b.Observe(a.Group, EngineLoad{Running: 7, Waiting: 2, At: f.now, OK: true})
	if got := f.b.Capacity(a.Group); got != 8 {
		t.Fatalf("capacity after a scrape between two requests: %d, want 8", got)
	}
	// a drains to 5 of other clients' requests, 1 of the router's: 2 free.
	tk := f.b.Start(Request{Model: "m"}, a, Load, 0)
	f.b.Observe(a.Group, EngineLoad{Running: 6, At: f.now, OK: true, Own: 1, Ended: f.b.replica(a.Group).ended.Load()})
	f.b.Observe(b.Group, EngineLoad{Running: 2, At: f.now, OK: true, Ended: f.b.replica(b.Group).ended.Load()})
	if got := f.b.free(f.b.replica(a.Group), a, f.now); got != 8-1-5 {
		t.Errorf("a free %d, want 2", got)
	}
	// b runs at its capacity with nobody waiting: it may take more.
	if got := f.b.Capacity(b.Group); got != 3 {
		t.Errorf("b's capacity after running at it unqueued: %d, want 3", got)
	}
	tk.End()
	f.b.Observe(a.Group, EngineLoad{Running: 0, At: f.now, OK: true, HasKV: true, KV: 0.97})
	if got := f.b.free(f.b.replica(a.Group), a, f.now); got != 0 {
		t.Errorf("a with a full KV cache: free %d, want 0", got)
	}
	f.b.Observe(b.Group, EngineLoad{Running: 0, At: f.now, OK: true})
	f.b.Refuse("m", b)
	if got := f.b.Free(f.reps); got != 0 {
		t.Errorf("a full, b refused a connection: free %d, want 0", got)
	}
	f.b.Refuse("m", a)
	if got := f.b.Free(f.reps); got != unlimited {
		t.Errorf("every replica refused: free %d, want unlimited (nothing to wait for)", got)
	}

	capped := New(Config{MaxInflight: 2}, nil)
	capped.now = func() time.Time { return f.now }
	if got := capped.Free(f.reps[:1]); got != 2 {
		t.Errorf("cap 2, no numbers yet: free %d, want 2", got)
	}
}

// A prefix held by two replicas goes to its home of the two while the
// home is within Threshold of the other, so the spilled copy can age out
// and every router picks alike; past that, to the less loaded.
func TestSpilledPrefixFlowsBackHome(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	f.stale()
	req := Request{Model: "m", Keys: keys(strings.Repeat("a document both replicas were sent. ", 80) + "question")}
	home, other := f.heldByBoth(req)
	for extra := 1; extra <= DefaultThreshold+1; extra++ {
		f.b.Start(Request{Model: "m"}, home, Load, 0) // home now carries extra more
		d := f.b.Choose(f.reps, req)
		want := home
		if extra > DefaultThreshold {
			want = other
		}
		if d.Order[0] != want || d.Reason != Affinity {
			t.Errorf("home carrying %d more: chose %s (%s), want %s by affinity", extra, d.Order[0].Group, d.Reason, want.Group)
		}
	}
}

// With flow control on, a new prompt's home without room (at the
// capacity flow control learned) is passed over for a replica with room,
// although it is within HomeSlack: flow control let the request go for
// that room. A long prefix match still waits for its replica. Without
// flow control the home wins as before.
func TestFlowChoosesRoomOverHome(t *testing.T) {
	system := strings.Repeat("a long document nobody sent before. ", 80)
	for _, flowOn := range []bool{false, true} {
		f := newFixture(t, Prefix, 2)
		f.b.cfg.Flow = flowOn
		f.b.cfg.MaxInflight = 2
		home := f.b.Choose(f.reps, Request{Model: "m", Keys: keys(system)}).Order[0]
		other := f.reps[0]
		if other == home {
			other = f.reps[1]
		}
		// Capacity 2 on both; home carries 2 of the router's, the other
		// 1: home is full, within HomeSlack of the other.
		f.b.Start(Request{Model: "m"}, home, Load, 0)
		f.b.Start(Request{Model: "m"}, home, Load, 0)
		f.b.Start(Request{Model: "m"}, other, Load, 0)
		for _, rt := range f.reps {
			st := f.b.replica(rt.Group)
			f.b.Observe(rt.Group, EngineLoad{Running: float64(st.inflight.Load()), At: f.now, OK: true, Own: float64(st.inflight.Load()), Ended: st.ended.Load()})
		}
		d := f.b.Choose(f.reps, Request{Model: "m", Keys: keys(system)})
		switch {
		case !flowOn && (d.Order[0] != home || d.Reason != Home):
			t.Errorf("flow off: chose %s (%s), want the home %s", d.Order[0].Group, d.Reason, home.Group)
		case flowOn && (d.Order[0] != other || d.Reason != Load):
			t.Errorf("flow on: chose %s (%s), want %s, the replica with room, by load", d.Order[0].Group, d.Reason, other.Group)
		}
		// A prompt whose long prefix the full home holds still goes there.
		f.b.Start(Request{Model: "m", Keys: keys(system)}, home, Home, 0).End()
		f.b.Start(Request{Model: "m"}, home, Load, 0)
		d = f.b.Choose(f.reps, Request{Model: "m", Keys: keys(system + "and a question")})
		if d.Order[0] != home || d.Reason != Affinity {
			t.Errorf("flow %v, long match on the full home: chose %s (%s), want %s by affinity", flowOn, d.Order[0].Group, d.Reason, home.Group)
		}
	}
}

// A raise of the learned capacity that the engine answers by queueing
// doubles the wait before the next raise; one that finds the engine
// running more resets it.
func TestCapacityRaiseBacksOff(t *testing.T) {
	f := newFixture(t, LeastLoaded, 1)
	g := f.reps[0].Group
	f.b.Observe(g, EngineLoad{Running: 16, Waiting: 1, At: f.now, OK: true})
	raise := func(at time.Time) bool {
		before := f.b.Capacity(g)
		f.b.Observe(g, EngineLoad{Running: float64(before), At: at, OK: true})
		return f.b.Capacity(g) > before
	}
	at := f.now
	if !raise(at) {
		t.Fatal("the first raise did not come at once")
	}
	f.b.Observe(g, EngineLoad{Running: 16, Waiting: 2, At: at, OK: true})
	for i, wait := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute} {
		fails := i + 1
		if raise(at.Add(wait - time.Millisecond)) {
			t.Fatalf("after %d failed raises: raised %v after the last, want a wait of %v", fails, wait-time.Millisecond, wait)
		}
		at = at.Add(wait)
		if !raise(at) {
			t.Fatalf("after %d failed raises: not raised after %v", fails, wait)
		}
		if got := f.b.Capacity(g); got != 18 {
			t.Fatalf("raised to %d, want 16 + 16/8", got)
		}
		// The engine queues at 16 again: the raise failed.
		f.b.Observe(g, EngineLoad{Running: 16, Waiting: 2, At: at, OK: true})
	}
	// A raise after which the engine runs 17 without a queue succeeded:
	// the next may come GrowEvery later.
	at = at.Add(time.Minute)
	if !raise(at) {
		t.Fatal("no raise after the longest wait")
	}
	f.b.Observe(g, EngineLoad{Running: 17, At: at, OK: true})
	f.b.Observe(g, EngineLoad{Running: 18, Waiting: 1, At: at, OK: true})
	if got := f.b.Capacity(g); got != 18 {
		t.Fatalf("capacity %d after the engine ran 17 and queued at 18, want 18", got)
	}
	if !raise(at.Add(GrowEvery)) {
		t.Error("after a raise that found more, the next did not come GrowEvery later")
	}
}

// Requests let go together by flow control each see the others' choices:
// eight of the same prompt, with one slot free on each of eight replicas,
// take one each, never two the same one (which would queue one in its
// engine while another engine has a free slot).
func TestChooseAndStartTogether(t *testing.T) {
	req := Request{Model: "m", Keys: keys("the same short prompt")}
	const n = 8
	for round := range 100 {
		f := newFixture(t, LeastLoaded, n)
		f.b.cfg.Flow = true
		f.b.cfg.MaxInflight = 1
		var wg, ready sync.WaitGroup
		ready.Add(n)
		start := make(chan struct{})
		got := make([]string, n)
		for i := range n {
			wg.Go(func() {
				ready.Done()
				<-start
				d, tk := f.b.ChooseAndStart(f.reps, req)
				if tk == nil {
					t.Error("no ticket")
					return
				}
				got[i] = d.Order[0].Group
			})
		}
		ready.Wait()
		close(start)
		wg.Wait()
		seen := map[string]bool{}
		for _, g := range got {
			if seen[g] {
				t.Fatalf("round %d: two requests took %s: %v", round, g, got)
			}
			seen[g] = true
		}
	}
}

// Routers whose load figures differ spill a busy prefix onto the same
// replica (the next of the prompt's rendezvous order within HomeSlack of
// the least loaded), not each onto the one it sees least loaded, and
// come back to the first holder together once it is within Threshold,
// whether or not they saw the spill.
func TestRoutersAgreeOnSpills(t *testing.T) {
	a, b := newFixture(t, Prefix, 4), newFixture(t, Prefix, 4)
	system := strings.Repeat("the handbook of one tenant, sent by every router. ", 60)
	req := Request{Model: "m", Keys: keys(system + "user: a question")}
	anchor := req.Keys[min(len(req.Keys), AnchorBlocks)-1]
	order := slices.Clone(a.reps)
	slices.SortFunc(order, func(x, y *routes.Route) int { return cmp.Compare(hrw(anchor, y.Group), hrw(anchor, x.Group)) })
	home := order[0]
	for _, f := range []*fixture{a, b} {
		d := f.b.Choose(f.reps, req)
		if d.Order[0].Group != home.Group || d.Reason != Home {
			t.Fatalf("first request: %s (%s), want the rendezvous home %s", d.Order[0].Group, d.Reason, home.Group)
		}
		f.b.Start(req, d.Order[0], d.Reason, d.Matched).End()
	}
	// The home's engine runs Threshold+2 of other clients' requests and
	// queues Threshold+1; a carries one request of its own on the next
	// replica in the order, b one on each of the two after it, so a sees
	// those two least loaded and b the next one.
	for _, f := range []*fixture{a, b} {
		f.b.Observe(home.Group, EngineLoad{Running: DefaultThreshold + 2, Waiting: DefaultThreshold + 1, At: f.now, OK: true})
	}
	on := func(f *fixture, rt *routes.Route) {
		f.b.Start(Request{Model: "m"}, f.reps[slices.IndexFunc(f.reps, func(r *routes.Route) bool { return r.Group == rt.Group })], Load, 0)
	}
	on(a, order[1])
	on(b, order[2])
	on(b, order[3])
	da, db := a.b.Choose(a.reps, req), b.b.Choose(b.reps, req)
	if da.Order[0].Group != order[1].Group || db.Order[0].Group != order[1].Group || da.Reason != Fallback || db.Reason != Fallback {
		t.Fatalf("home past Threshold: a chose %s (%s), b %s (%s); want both %s, the next in the prompt's order, as fallback",
			da.Order[0].Group, da.Reason, db.Order[0].Group, db.Reason, order[1].Group)
	}
	// Only b sends it there; the home drains back within Threshold.
	b.b.Start(req, db.Order[0], db.Reason, db.Matched).End()
	for _, f := range []*fixture{a, b} {
		f.b.Observe(home.Group, EngineLoad{Running: DefaultThreshold - 1, At: f.now, OK: true})
		if d := f.b.Choose(f.reps, req); d.Order[0].Group != home.Group || d.Reason != Affinity {
			t.Errorf("home within Threshold again: chose %s (%s), want %s by affinity", d.Order[0].Group, d.Reason, home.Group)
		}
	}
}

// A router that first sent a long prefix elsewhere (its home was busy)
// sends it home once the home is within Threshold: the other routers
// keep it warm there, so the routers converge on one copy. A prefix
// shorter than AnchorBlocks is not presumed to be at home: its anchor
// is not shared by every request of it.
func TestRecurringPrefixGoesHome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		system string
		home   bool
	}{
		{"long prefix", strings.Repeat("the manual of a product, long enough to anchor. ", 60), true},
		{"short prefix", strings.Repeat("short rules. ", 30), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Prefix, 4)
			req := Request{Model: "m", Keys: keys(tc.system + "user: the first question, which is longer than a block of text so the prompt has one more block")}
			home := f.b.Choose(f.reps, req).Order[0]
			elsewhere := f.reps[0]
			if elsewhere == home {
				elsewhere = f.reps[1]
			}
			f.b.Start(req, elsewhere, Load, 0).End()
			for range DefaultThreshold - 1 {
				f.b.Start(Request{Model: "m"}, home, Load, 0) // busy, but within Threshold
			}
			next := Request{Model: "m", Keys: keys(tc.system + "user: the second question, also longer than a block of text so the prompt has one more block")}
			d := f.b.Choose(f.reps, next)
			switch {
			case tc.home && (d.Order[0] != home || d.Reason != Home):
				t.Errorf("chose %s (%s), want the home %s", d.Order[0].Group, d.Reason, home.Group)
			case !tc.home && (d.Order[0] != elsewhere || d.Reason != Affinity):
				t.Errorf("chose %s (%s), want %s, the holder, by affinity", d.Order[0].Group, d.Reason, elsewhere.Group)
			}
		})
	}
}

// A KV cache past KVFull weighs on a replica for prompts it does not
// hold (they need their whole prefix's blocks there), not for one whose
// prefix it holds: those need a few blocks, so the prefix stays rather
// than spilling a copy that would fill another replica's cache.
func TestFullKVKeepsHeldPrefix(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	system := strings.Repeat("a prefix this replica holds, long enough to anchor. ", 60)
	req := Request{Model: "m", Keys: keys(system + "user: first")}
	d, _ := f.send(req) // stays in flight: load 1
	warm := d.Order[0]
	f.b.Observe(warm.Group, EngineLoad{Running: 1, Own: 1, HasKV: true, KV: 0.97, At: f.now, OK: true})
	if got := f.b.Info(warm).Load; got != 1+DefaultThreshold {
		t.Fatalf("load with a full KV cache %v, want %d", got, 1+DefaultThreshold)
	}
	if d := f.b.Choose(f.reps, Request{Model: "m", Keys: keys(system + "user: second")}); d.Order[0] != warm || d.Reason != Affinity {
		t.Errorf("held prefix on a replica with a full KV cache: chose %s (%s), want %s by affinity", d.Order[0].Group, d.Reason, warm.Group)
	}
	if d := f.b.Choose(f.reps, Request{Model: "m", Keys: keys(strings.Repeat("a prompt nobody sent. ", 120))}); d.Order[0] == warm {
		t.Errorf("new prompt went to %s, whose KV cache is full", warm.Group)
	}
}

// With flow control on, a prefix held by two replicas goes to the first
// in its order although that one is at capacity and the other has room:
// taking the one with room would keep both copies warm.
func TestFlowKeepsOneCopy(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	f.b.cfg.Flow = true
	f.b.cfg.MaxInflight = 2
	req := Request{Model: "m", Keys: keys(strings.Repeat("a document both replicas were sent once. ", 80) + "question")}
	first, _ := f.heldByBoth(req)
	f.b.Start(Request{Model: "m"}, first, Load, 0)
	f.b.Start(Request{Model: "m"}, first, Load, 0) // first is at its cap, other has room
	if d := f.b.Choose(f.reps, req); d.Order[0] != first || d.Reason != Affinity {
		t.Errorf("chose %s (%s), want %s, the first holder, by affinity", d.Order[0].Group, d.Reason, first.Group)
	}
}

// question is the i-th request of model m whose prompt starts with system.
func question(system string, i int) Request {
	return Request{Model: "m", Keys: keys(system + fmt.Sprintf("user: question %d", i))}
}

// A holder keeps its prefix, whatever its load, while its engine has
// queued at most Threshold more requests than the least-loaded replica's:
// a request there waits for that many slots to free and prefills only
// its own tail, where a spill prefills the whole prefix cold. The
// running batch does not count, however large.
func TestHolderKeepsPrefixWhileQueueIsShort(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	system := strings.Repeat("a long document every request of a tenant starts with. ", 60)
	prompt := func(i int) Request { return question(system, i) }
	first, _ := f.send(prompt(0))
	warm := first.Order[0]
	n := DefaultThreshold + 5
	for i := 1; i <= n; i++ {
		if d, _ := f.send(prompt(i)); d.Order[0] != warm || d.Reason != Affinity {
			t.Fatalf("request %d, %d in flight on an engine with room: chose %s (%s), want %s by affinity", i, i, d.Order[0].Group, d.Reason, warm.Group)
		}
	}
	// The engine queues one of the router's n+1: it runs n at once (the
	// capacity it learns), and one waits.
	f.b.Observe(warm.Group, EngineLoad{Running: float64(n), Waiting: 1, Own: float64(n + 1), At: f.now, OK: true})
	if d, _ := f.send(prompt(n + 1)); d.Order[0] != warm || d.Reason != Affinity {
		t.Fatalf("the holder queueing 1, %d above the least loaded: chose %s (%s), want %s by affinity", n+1, d.Order[0].Group, d.Reason, warm.Group)
	}
	// Other clients queue Threshold more there: the router's next would
	// wait behind Threshold+2, past the idle replica's 0 by more than
	// Threshold.
	f.b.Observe(warm.Group, EngineLoad{Running: float64(n), Waiting: DefaultThreshold + 1, Own: float64(n + 2), At: f.now, OK: true})
	d, _ := f.send(prompt(n + 2))
	if d.Order[0] == warm || d.Reason != Fallback {
		t.Fatalf("the holder queueing %d: chose %s (%s), want the other replica as fallback", DefaultThreshold+2, d.Order[0].Group, d.Reason)
	}
	// Their requests leave the queue: the router's n+2 still there are 2
	// past the capacity, within Threshold, and the holder takes the
	// prefix back.
	f.b.Observe(warm.Group, EngineLoad{Running: float64(n), Waiting: 2, Own: float64(n + 2), At: f.now, OK: true})
	if d := f.b.Choose(f.reps, prompt(n+3)); d.Order[0] != warm || d.Reason != Affinity {
		t.Errorf("the holder 2 past its capacity: chose %s (%s), want %s by affinity", d.Order[0].Group, d.Reason, warm.Group)
	}
	// Numbers gone stale say nothing of its queue: Threshold on the
	// router's own counts decides.
	f.now = f.now.Add(time.Minute)
	if d := f.b.Choose(f.reps, prompt(n+4)); d.Order[0] == warm {
		t.Errorf("the holder without fresh numbers, %d above the least loaded: chose it (%s)", n+1, d.Reason)
	}
}

// A holder without room past Threshold keeps its prefix when the least
// loaded replica has no room either: the request would wait there too,
// behind a cold prefill of the whole prefix.
func TestNoSpillOntoAReplicaWithoutRoom(t *testing.T) {
	f := newFixture(t, Prefix, 2)
	system := strings.Repeat("a document that only one replica should hold. ", 60)
	prompt := func(i int) Request { return question(system, i) }
	first, _ := f.send(prompt(0))
	warm, other := first.Order[0], f.reps[0]
	if other == warm {
		other = f.reps[1]
	}
	n := DefaultThreshold + 5
	for i := 1; i <= n; i++ {
		f.send(prompt(i))
	}
	// Other clients queue Threshold+1 behind the router's n+1.
	f.b.Observe(warm.Group, EngineLoad{Running: float64(n), Waiting: DefaultThreshold + 2, Own: float64(n + 1), At: f.now, OK: true})
	f.b.Observe(other.Group, EngineLoad{Running: 3, Waiting: 1, At: f.now, OK: true})
	if d := f.b.Choose(f.reps, prompt(n+1)); d.Order[0] != warm || d.Reason != Affinity {
		t.Errorf("both engines queueing: chose %s (%s), want %s by affinity", d.Order[0].Group, d.Reason, warm.Group)
	}
	f.b.Observe(other.Group, EngineLoad{Running: 3, At: f.now, OK: true})
	if d := f.b.Choose(f.reps, prompt(n+2)); d.Order[0] != other || d.Reason != Fallback {
		t.Errorf("only the holder queueing: chose %s (%s), want %s as fallback", d.Order[0].Group, d.Reason, other.Group)
	}
}
