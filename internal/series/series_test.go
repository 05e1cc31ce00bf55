package series

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.UnixMilli(1_700_000_000_000)

func at(i int) time.Time { return t0.Add(time.Duration(i) * 2 * time.Second) }

func TestWindowKeepsTheLastCapSamplesInOrder(t *testing.T) {
	w := NewWindow[string](5)
	for i := range 12 {
		w.Add(at(i), map[string]float64{"a": float64(i)})
	}
	s := w.Since(0, nil)
	if len(s.Times) != 5 || len(s.Series["a"]) != 5 {
		t.Fatalf("held %d times, %d values; want 5", len(s.Times), len(s.Series["a"]))
	}
	for j := range 5 {
		if s.Times[j] != at(7+j).UnixMilli() || s.Series["a"][j] != float64(7+j) {
			t.Errorf("sample %d = %d %v, want %d %v", j, s.Times[j], s.Series["a"][j], at(7+j).UnixMilli(), 7+j)
		}
	}
	// Since returns only what came after.
	s = w.Since(at(9).UnixMilli(), nil)
	if len(s.Times) != 2 || s.Times[0] != at(10).UnixMilli() || !s.Series["a"].Equal(Values{10, 11}) {
		t.Errorf("since sample 9: %v %v", s.Times, s.Series["a"])
	}
	if s = w.Since(at(11).UnixMilli(), nil); len(s.Times) != 0 || len(s.Series["a"]) != 0 {
		t.Errorf("since the last sample: %v %v", s.Times, s.Series)
	}
}

func TestWindowMemoryIsBounded(t *testing.T) {
	w := NewWindow[int](4)
	// Each sample names a new series: old ones leave once they have no
	// value left in the window, so at most Cap series are ever held.
	for i := range 1000 {
		w.Add(at(i), map[int]float64{i: 1})
		if n := len(w.Keys()); n > 4 {
			t.Fatalf("after %d samples the window holds %d series", i+1, n)
		}
		for _, c := range w.cols {
			if len(c.vals) != 4 {
				t.Fatalf("a column grew to %d values", len(c.vals))
			}
		}
	}
	if len(w.times) != 4 {
		t.Fatalf("times grew to %d", len(w.times))
	}
}

func TestWindowGapsAreNullNeverZero(t *testing.T) {
	w := NewWindow[string](10)
	w.Add(at(0), map[string]float64{"a": 1, "b": 5})
	w.Add(at(1), map[string]float64{"b": 6})          // a's scrape failed
	w.Add(at(2), map[string]float64{"a": math.NaN()}) // a read, no value; b failed
	w.Add(at(3), map[string]float64{"a": 3, "c": 0, "b": math.Inf(1)})
	s := w.Since(0, nil)
	nan := math.NaN()
	for k, want := range map[string]Values{"a": {1, nan, nan, 3}, "b": {5, 6, nan, nan}, "c": {nan, nan, nan, 0}} {
		if !s.Series[k].Equal(want) {
			t.Errorf("%s = %v, want %v", k, s.Series[k], want)
		}
	}
	b, err := json.Marshal(s.Series["a"])
	if err != nil || string(b) != "[1,null,null,3]" {
		t.Errorf("JSON %s %v", b, err)
	}
	var back Values
	if err := json.Unmarshal([]byte(`[0.5,null,0]`), &back); err != nil || !back.Equal(Values{0.5, nan, 0}) {
		t.Errorf("decoded %v %v", back, err)
	}
	// keep filters series.
	if s := w.Since(0, func(k string) bool { return k == "c" }); len(s.Series) != 1 {
		t.Errorf("filtered: %v", s.Series)
	}
}

func TestCountersRatesResetsAndGaps(t *testing.T) {
	c := NewCounters[string]()
	round := func(i int, v map[string]float64) map[string]float64 {
		c.Begin(at(i))
		out := map[string]float64{}
		for k, x := range v {
			out[k] = c.Rate(k, x)
		}
		c.End()
		return out
	}
	if r := round(0, map[string]float64{"n": 100}); !math.IsNaN(r["n"]) {
		t.Errorf("first reading has a rate: %v", r)
	}
	if r := round(1, map[string]float64{"n": 110}); r["n"] != 5 {
		t.Errorf("10 in 2 s = %v/s, want 5", r["n"])
	}
	// The process restarted: the total fell to 4, so 4 happened since.
	if r := round(2, map[string]float64{"n": 4}); r["n"] != 2 {
		t.Errorf("after a reset: %v/s, want 2", r["n"])
	}
	// A failed scrape: n is not read at all in round 3...
	round(3, map[string]float64{})
	// ...so round 4 has no base: a gap, not 50 over one interval.
	if r := round(4, map[string]float64{"n": 104}); !math.IsNaN(r["n"]) {
		t.Errorf("after a gap: %v, want NaN", r["n"])
	}
	if r := round(5, map[string]float64{"n": 108}); r["n"] != 2 {
		t.Errorf("after recovering: %v, want 2", r["n"])
	}
	if len(c.prev) != 1 {
		t.Errorf("counters hold %d totals", len(c.prev))
	}
}

func TestRatioAndQuantile(t *testing.T) {
	if v := Ratio(3, 4, true); v != 0.75 {
		t.Errorf("ratio %v", v)
	}
	for _, v := range []float64{Ratio(3, 0, true), Ratio(3, 4, false)} {
		if !math.IsNaN(v) {
			t.Errorf("ratio without observations: %v", v)
		}
	}
	inf := math.Inf(1)
	b := []Bucket{{inf, 100}, {10, 50}, {20, 90}, {40, 100}} // unsorted on purpose
	for q, want := range map[float64]float64{0.5: 10, 0.25: 5, 0.7: 15, 0.9: 20, 0.99: 38, 1: 40} {
		if got := Quantile(q, b); math.Abs(got-want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", q, got, want)
		}
	}
	if got := Quantile(0.99, []Bucket{{1, 0}, {inf, 10}}); got != 1 {
		t.Errorf("everything above the last bound: %v, want 1", got)
	}
	for _, empty := range [][]Bucket{nil, {{1, 0}, {inf, 0}}, {{1, 3}}} {
		if got := Quantile(0.5, empty); !math.IsNaN(got) {
			t.Errorf("Quantile(%v) = %v, want NaN", empty, got)
		}
	}
}

func TestRunSamplesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, time.Millisecond, func(context.Context, time.Time) {
			if n.Add(1) == 3 {
				cancel()
			}
		})
	}()
	<-done
	if n.Load() != 3 {
		t.Errorf("sampled %d times after cancelling at 3", n.Load())
	}
}
