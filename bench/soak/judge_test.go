package soak

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

func TestJudgeAttributesFailuresToFaultsOnTheirPath(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	faults := []record.Fault{
		{Kind: "sigkill-engine", Target: "engine-a1", Start: at(10), End: at(11), Recovered: at(12), Bound: 3 * time.Second},
		{Kind: "restart-router", Target: "router-1", Start: at(50), End: at(51), Recovered: at(52), Bound: 5 * time.Second},
		{Kind: "sigstop-model", Target: "model-PPOCR", Start: at(80), End: at(85), Bound: 10 * time.Second}, // never recovered
	}
	path := []string{"engine-a1", "router-1"}
	cases := []struct {
		name string
		r    record.Result
		want record.Outcome
	}{
		{"served", record.Result{Start: at(10), End: at(11), Path: path}, record.Served},
		{"a defect stays one, fault or not", record.Result{Start: at(10), End: at(11), Path: path, Defect: true}, record.Defect},
		{"failed during the fault", record.Result{Start: at(9), End: at(10.5), Path: path, Failed: true}, record.CleanFail},
		{"failed within the slack after recovery", record.Result{Start: at(16), End: at(16.1), Path: path, Failed: true}, record.CleanFail},
		{"failed after the slack", record.Result{Start: at(17.5), End: at(18), Path: path, Failed: true}, record.Unattributed},
		{"ended before the fault began", record.Result{Start: at(5), End: at(9.9), Path: path, Failed: true}, record.Unattributed},
		{"the fault was not on its path", record.Result{Start: at(10), End: at(11), Path: []string{"engine-a2"}, Failed: true}, record.Unattributed},
		{"a lossless fault excuses nothing", record.Result{Start: at(50), End: at(51), Path: path, Failed: true}, record.Unattributed},
		{"never recovered: end plus bound plus slack", record.Result{Start: at(99), End: at(99.5), Path: []string{"model-PPOCR"}, Failed: true}, record.CleanFail},
		{"never recovered, later", record.Result{Start: at(100.5), End: at(101), Path: []string{"model-PPOCR"}, Failed: true}, record.Unattributed},
		{"only the named kinds may explain it", record.Result{Start: at(10), End: at(11), Path: path, Failed: true, Only: ledgerLost}, record.Unattributed},
		{"a long request a fault hit in its middle", record.Result{Start: at(0), End: at(30), Path: path, Failed: true}, record.CleanFail},
	}
	rs := make([]record.Result, len(cases))
	for i, c := range cases {
		rs[i] = c.r
	}
	judge(rs, faults)
	for i, c := range cases {
		if rs[i].Outcome != c.want {
			t.Errorf("%s: %s, want %s", c.name, rs[i].Outcome, c.want)
		}
		if c.want == record.CleanFail && rs[i].Blame == "" {
			t.Errorf("%s: no fault named", c.name)
		}
	}
}

// The schedule draws kinds by weight: the two that replace the gateway
// come half as often as the rest.
func TestPickKindFollowsWeights(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	n := map[string]int{}
	const draws = 60000
	for range draws {
		n[pickKind(rnd).name]++
	}
	total := 0.0
	for i := range kinds {
		total += kindWeight(&kinds[i])
	}
	for i := range kinds {
		k := &kinds[i]
		want := draws * kindWeight(k) / total
		if got := float64(n[k.name]); got < want*0.9 || got > want*1.1 {
			t.Errorf("%s drawn %v times, want about %.0f", k.name, got, want)
		}
	}
	if n["restart-gateway"]*3 > n["sigkill-engine"]*2 {
		t.Errorf("restart-gateway %d, sigkill-engine %d: want about half", n["restart-gateway"], n["sigkill-engine"])
	}
}
