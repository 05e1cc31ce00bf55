// Package series keeps short time series in memory for the live charts of
// the router's status page and the supervisor's UI: a fixed number of
// samples (the window), one column of values per series, and the counter
// and histogram arithmetic that turns scraped totals into per-interval
// numbers. A value that could not be read is NaN in the window and null in
// JSON: a gap, never a zero.
package series

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Window holds the last Cap samples of every series keyed by K. Memory is
// bounded by Cap times the number of series that had a value within the
// window: a series with none left is dropped. Safe for concurrent use.
type Window[K comparable] struct {
	mu    sync.Mutex
	times []int64 // unix ms, a ring; next is where the next sample goes
	next  int
	n     int    // samples held, up to len(times)
	seq   uint64 // samples ever added
	cols  map[K]*column
}

type column struct {
	vals []float64 // same ring positions as times
	last uint64    // seq of the last sample that gave this series a value
}

// NewWindow returns a window of capacity samples (at least 2).
func NewWindow[K comparable](capacity int) *Window[K] {
	capacity = max(capacity, 2)
	return &Window[K]{times: make([]int64, capacity), cols: map[K]*column{}}
}

// Cap is the number of samples the window keeps.
func (w *Window[K]) Cap() int { return len(w.times) }

// Add appends one sample taken at t: values holds the series read this
// time; every other series known to the window gets a gap. NaN and ±Inf
// values are gaps too.
func (w *Window[K]) Add(t time.Time, values map[K]float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := w.next
	w.times[i] = t.UnixMilli()
	w.next = (i + 1) % len(w.times)
	w.n = min(w.n+1, len(w.times))
	w.seq++
	for k, c := range w.cols {
		if _, ok := values[k]; !ok {
			c.vals[i] = math.NaN()
		}
		// A series whose every value in the window is a gap goes.
		if w.seq-c.last >= uint64(len(w.times)) {
			if _, ok := values[k]; !ok || !finite(values[k]) {
				delete(w.cols, k)
			}
		}
	}
	for k, v := range values {
		c := w.cols[k]
		if !finite(v) {
			if c != nil {
				c.vals[i] = math.NaN()
			}
			continue
		}
		if c == nil {
			c = &column{vals: make([]float64, len(w.times))}
			for j := range c.vals {
				c.vals[j] = math.NaN()
			}
			w.cols[k] = c
		}
		c.vals[i] = v
		c.last = w.seq
	}
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Snapshot is a copy of the window's samples taken after a time, oldest
// first: Times[i] (unix ms) is when the values Series[k][i] were read.
type Snapshot[K comparable] struct {
	Times  []int64
	Series map[K]Values
}

// Since copies the samples taken after sinceMS (unix ms; 0 for all), for
// the series keep accepts (nil: all).
func (w *Window[K]) Since(sinceMS int64, keep func(K) bool) Snapshot[K] {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := (w.next - w.n + len(w.times)) % len(w.times)
	// Skip the samples at or before sinceMS; times only grow unless the
	// clock steps back, and then the caller gets everything after the step.
	skip := 0
	for skip < w.n && w.times[(start+skip)%len(w.times)] <= sinceMS {
		skip++
	}
	n := w.n - skip
	snap := Snapshot[K]{Times: make([]int64, n), Series: make(map[K]Values, len(w.cols))}
	for j := range n {
		snap.Times[j] = w.times[(start+skip+j)%len(w.times)]
	}
	for k, c := range w.cols {
		if keep != nil && !keep(k) {
			continue
		}
		v := make(Values, n)
		for j := range n {
			v[j] = c.vals[(start+skip+j)%len(w.times)]
		}
		snap.Series[k] = v
	}
	return snap
}

// Keys lists the series the window holds now.
func (w *Window[K]) Keys() []K {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]K, 0, len(w.cols))
	for k := range w.cols {
		out = append(out, k)
	}
	return out
}

// Values is one series' values; NaN is a gap and encodes as JSON null.
// Numbers are written with six significant digits: the charts need no more,
// and hundreds of series stay small on the wire.
type Values []float64

// MarshalJSON writes the values with null for gaps.
func (v Values) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+len(v)*6)
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		if !finite(x) {
			b = append(b, "null"...)
			continue
		}
		b = strconv.AppendFloat(b, x, 'g', 6, 64)
	}
	return append(b, ']'), nil
}

// UnmarshalJSON reads null as a gap.
func (v *Values) UnmarshalJSON(b []byte) error {
	var raw []*float64
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Values, len(raw))
	for i, p := range raw {
		out[i] = math.NaN()
		if p != nil {
			out[i] = *p
		}
	}
	*v = out
	return nil
}

// Equal reports whether two series are the same, gaps included.
func (v Values) Equal(o Values) bool {
	return slices.EqualFunc(v, o, func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) })
}
