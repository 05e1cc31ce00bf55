package routing

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSelected(t *testing.T) {
	got, err := selected("policy", Policies, nil)
	if err != nil || !reflect.DeepEqual(got, Policies) {
		t.Fatalf("no selection = %v, %v; want every policy", got, err)
	}
	// The order is the canonical one, whatever the order asked for.
	got, err = selected("policy", Policies, []string{"least-loaded", "prefix"})
	if want := []string{"prefix", "least-loaded"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("selected = %v, %v; want %v", got, err, want)
	}
	if _, err := selected("workload", Workloads, []string{"distinct", "bogus"}); err == nil || !strings.Contains(err.Error(), `"bogus"`) ||
		!strings.Contains(err.Error(), "shared,distinct,preloaded") {
		t.Fatalf("unknown workload: error %v, want it named with the choices", err)
	}
}

func TestDecisionsDiffAndSpread(t *testing.T) {
	before := map[string]map[string]float64{"replica-0": {"load": 5}, "replica-1": {"load": 2, "affinity": 1}}
	after := map[string]map[string]float64{"replica-0": {"load": 9, "fallback": 1}, "replica-1": {"load": 2, "affinity": 4}, "replica-2": {"load": 3}}
	d := diffDecisions(after, before)
	want := map[string]map[string]float64{"replica-0": {"load": 4, "fallback": 1}, "replica-1": {"affinity": 3}, "replica-2": {"load": 3}}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("diff = %v, want %v", d, want)
	}
	if got := spread(4, d); got != "5/3/3/0" {
		t.Errorf("spread = %q, want 5/3/3/0 (a replica that got nothing listed as 0)", got)
	}
	if got := decisionsText(d); got != "replica-0 5 (fallback 1, load 4), replica-1 3 (affinity 3), replica-2 3 (load 3)" {
		t.Errorf("decisionsText = %q", got)
	}
}

// The shared workload's ladder climbs in steps at most 15% apart from 6
// requests/s per replica up, so that a verdict at a knee compares like
// with like.
func TestSharedLadderSteps(t *testing.T) {
	rates := ratesPerReplica[Shared]
	for i := 1; i < len(rates); i++ {
		if rates[i] <= rates[i-1] {
			t.Fatalf("step %d (%g) does not climb from %g", i, rates[i], rates[i-1])
		}
		if rates[i-1] >= 6 && rates[i] > 1.15*rates[i-1] {
			t.Errorf("%g → %g is %.1f%% up, more than 15%%", rates[i-1], rates[i], 100*(rates[i]/rates[i-1]-1))
		}
	}
}

func TestFailuresText(t *testing.T) {
	if got := failuresText(nil); got != "" {
		t.Errorf("no failures: %q", got)
	}
	got := failuresText(map[string]int{"HTTP 502 router_unavailable": 1, "stream cut: unexpected EOF": 3, "HTTP 503 a": 1})
	if want := "; failed: 3 × stream cut: unexpected EOF, 1 × HTTP 502 router_unavailable, 1 × HTTP 503 a"; got != want {
		t.Errorf("failuresText = %q, want %q", got, want)
	}
}

// The fleet is judged at the sustained rate; the ladder's knee step is
// shown beside it, not judged.
func TestFleetVsOne(t *testing.T) {
	step := func(rate float64, p90 time.Duration, hit float64) Step {
		return Step{Rate: rate, P90: p90, HitRate: hit, Sent: 100, OK: 100}
	}
	one := Curve{Replicas: 2, Workload: Shared, Policy: "prefix", Steps: []Step{step(40, 50*time.Millisecond, 0.95), step(50, time.Second, 0.9), step(60, 5*time.Second, 0.7)}}
	fleet := Curve{Replicas: 2, Workload: Shared, Policy: Fleet, Steps: []Step{step(40, 60*time.Millisecond, 0.94), step(50, 3*time.Second, 0.8)}}
	r := Result{Curves: []Curve{one, fleet}}
	tt, hits := r.FleetVsOne(2)
	if !tt.Known || tt.Met || !strings.Contains(tt.Measured, "no sustained comparison") || !strings.Contains(tt.Measured, "50.0 req/s: 3.00×") {
		t.Errorf("without a sustained comparison: %+v", tt)
	}
	if hits.Met {
		t.Errorf("hit rate met without a sustained comparison: %+v", hits)
	}
	fleet.Sustained = &Sustained{Rate: 40, One: step(40, 100*time.Millisecond, 0.95), Fleet: step(40, 110*time.Millisecond, 0.92)}
	r = Result{Curves: []Curve{one, fleet}}
	tt, hits = r.FleetVsOne(2)
	if !tt.Met || !strings.HasPrefix(tt.Measured, "1.10× (0.11s vs 0.10s over 30s at 40.0 req/s, 80% of one router's knee, 100/100 served; at the ladder's knee step, 50.0 req/s: 3.00×") {
		t.Errorf("sustained 1.1×: %+v", tt)
	}
	if !hits.Met || !strings.HasPrefix(hits.Measured, "-3.0 points") {
		t.Errorf("sustained hit rates 92%% vs 95%%: %+v", hits)
	}
	fleet.Sustained.Fleet = step(40, 130*time.Millisecond, 0.85)
	fleet.Sustained.Fleet.OK = 99
	if tt, hits = r.FleetVsOne(2); tt.Met || hits.Met {
		t.Errorf("sustained 1.3×, one failed, 10 points: %+v %+v", tt, hits)
	}
	// One router sustained only a lower rate: the fleet is judged there.
	fleet.Sustained = &Sustained{Rate: 20, One: step(20, 100*time.Millisecond, 0.95), Fleet: step(20, 100*time.Millisecond, 0.95),
		Above: []Step{step(25, 900*time.Millisecond, 0.9)}}
	fleet.Sustained.Fleet.Spills = 9
	r = Result{Curves: []Curve{one, fleet}}
	mdCfg := Config{Replicas: []int{2}, Workloads: []string{Shared}, Policies: []string{"prefix", Fleet}, Duration: 5 * time.Second}
	if md := markdown(mdCfg, r); !strings.Contains(md, "| 3 routers behind Nginx | 20.0 | 0.00 | 0.10 | 0.00 | 95.0% | 9 | 100/100 |") {
		t.Errorf("report lacks the fleet's sustained row with its spills:\n%s", md)
	}
	if tt, _ = r.FleetVsOne(2); !tt.Met || !strings.HasPrefix(tt.Measured, "1.00× (0.10s vs 0.10s over 30s at 20.0 req/s, 40% of one router's knee") {
		t.Errorf("sustained at a lower rate: %+v", tt)
	}
	// One router sustained no rate: nothing to judge the fleet at.
	fleet.Sustained = &Sustained{Rate: 16, Above: []Step{step(25, time.Second, 0.9), step(20, time.Second, 0.9), step(16, time.Second, 0.9)}}
	r = Result{Curves: []Curve{one, fleet}}
	tt, hits = r.FleetVsOne(2)
	if tt.Met || hits.Met || !strings.HasPrefix(tt.Measured, "one router sustained none of 3 rates down to 16.0 req/s") {
		t.Errorf("no sustained rate: %+v %+v", tt, hits)
	}
	if md := markdown(mdCfg, r); !strings.Contains(md, "| one router (not sustained) | 16.0 | 0.00 | 1.00 | 0.00 | 90.0% | 0 | 100/100 |") {
		t.Errorf("report lacks the unsustained rates:\n%s", md)
	}
}
