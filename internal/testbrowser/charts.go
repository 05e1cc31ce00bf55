package testbrowser

import (
	"math"
	"strconv"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/series"
)

// Line is what a page says it drew for one line of a chart (internal/charts
// marks each path with its series field, point count and last point, and
// each chart with its time range).
type Line struct {
	Field string  `json:"field"`
	N     int     `json:"n"`    // data-n: points drawn
	Cmds  int     `json:"cmds"` // M and L commands in the path data
	T0    int64   `json:"t0"`   // the chart's time range, unix ms
	T1    int64   `json:"t1"`
	LastT int64   `json:"lastT"`
	Last  float64 `json:"last"`
	Has   bool    `json:"has"` // whether the line has a last point
}

// Lines reads every chart line under the CSS selector sel.
func (b *Browser) Lines(sel string) []Line {
	b.t.Helper()
	var out []Line
	b.Eval(`Array.from(document.querySelectorAll(`+strconv.Quote(sel+" path.ln")+`)).map((p) => {
		const svg = p.closest("svg");
		return {field: p.dataset.field, n: +p.dataset.n, cmds: (p.getAttribute("d").match(/[ML]/g) || []).length,
			t0: +svg.dataset.t0, t1: +svg.dataset.t1, lastT: +(p.dataset.t1 || 0), last: +(p.dataset.last || 0), has: "last" in p.dataset};
	})`, &out)
	return out
}

// CheckLines asserts that each drawn line has exactly the points a series
// route has for its field within the chart's time range (times and ser
// are the route's t array and series), and the same last point.
func CheckLines(t testing.TB, what string, lines []Line, times []int64, ser map[string]series.Values) {
	t.Helper()
	if len(lines) == 0 {
		t.Fatalf("%s: no lines drawn", what)
	}
	for _, l := range lines {
		vals, ok := ser[l.Field]
		if !ok {
			t.Errorf("%s: the page draws %q, the route has no such series", what, l.Field)
			continue
		}
		n, lastT, last := 0, int64(0), math.NaN()
		for i, ts := range times {
			if ts >= l.T0 && ts <= l.T1 && !math.IsNaN(vals[i]) {
				n, lastT, last = n+1, ts, vals[i]
			}
		}
		if l.N != n || l.Cmds != n {
			t.Errorf("%s %s: drew %d points (%d path commands), the route has %d in [%d, %d]", what, l.Field, l.N, l.Cmds, n, l.T0, l.T1)
		}
		if n > 0 && (!l.Has || l.LastT != lastT || l.Last != last) {
			t.Errorf("%s %s: last point drawn %v at %d, the route has %v at %d", what, l.Field, l.Last, l.LastT, last, lastT)
		}
	}
}

// Fields lists the lines' fields.
func Fields(lines []Line) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Field
	}
	return out
}

// Max is the largest value of a series (-Inf when it has none).
func Max(v series.Values) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		if !math.IsNaN(x) && x > m {
			m = x
		}
	}
	return m
}
