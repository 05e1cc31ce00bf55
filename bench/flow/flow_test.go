package flow

import (
	"math"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	loads := []Load{{Tenant: "a"}, {Tenant: "b"}, {Tenant: "c"}, {Tenant: "d"}}
	for _, c := range []struct {
		tokens map[string]int
		want   float64
	}{
		{map[string]int{"a": 5, "b": 5, "c": 5, "d": 5}, 1},
		{map[string]int{"a": 20}, 0.25},
		{map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}, 100.0 / 120},
		{map[string]int{}, 0},
	} {
		if got := jain(Measured{Tokens: c.tokens}, loads); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("jain(%v) = %v, want %v", c.tokens, got, c.want)
		}
	}
}

// A request that was not served counts as the slowest in a percentile.
func TestPercentileCountsUnserved(t *testing.T) {
	m := Measured{TTFT: map[string][]time.Duration{"x": {time.Second, 2 * time.Second}},
		Outcome: map[string]*Outcome{"x": {Sent: 4, Served: 2, Refused: 2}}}
	if got := p(m, "x", 0.99); got != requestTimeout {
		t.Errorf("p99 = %v, want the timeout (half were not served)", got)
	}
	if got := p(m, "x", 0.25); got != time.Second {
		t.Errorf("p25 = %v, want 1s", got)
	}
}
