package routing

import (
	"reflect"
	"strings"
	"testing"
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
