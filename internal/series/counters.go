package series

import (
	"math"
	"sort"
	"time"
)

// Counters turns cumulative totals (Prometheus counters, histogram sums,
// counts and buckets) into per-interval increases. One sampling round is
// Begin, any number of Delta calls, End. A total that went down was reset
// (the process restarted): the increase is then the new total, as
// Prometheus' rate() counts it. A total not read in a round (its scrape
// failed) is forgotten at End, so the next round has no base for it and
// reports a gap instead of an increase spanning the outage.
type Counters[K comparable] struct {
	at    time.Time
	round uint64
	prev  map[K]counter
}

type counter struct {
	v     float64
	at    time.Time
	round uint64
}

// NewCounters returns an empty set.
func NewCounters[K comparable]() *Counters[K] {
	return &Counters[K]{prev: map[K]counter{}}
}

// Begin starts a round sampled at t.
func (c *Counters[K]) Begin(t time.Time) {
	c.at = t
	c.round++
}

// Delta records total v for k and returns its increase since the previous
// round and the seconds between the two; ok is false for the first reading
// of k (or the first after a gap).
func (c *Counters[K]) Delta(k K, v float64) (inc, seconds float64, ok bool) {
	p, had := c.prev[k]
	c.prev[k] = counter{v: v, at: c.at, round: c.round}
	if !had || p.round != c.round-1 || !c.at.After(p.at) || !finite(v) || !finite(p.v) {
		return 0, 0, false
	}
	inc = v - p.v
	if inc < 0 {
		inc = v // reset: counted from zero
	}
	return inc, c.at.Sub(p.at).Seconds(), true
}

// Rate is k's increase per second since the previous round, NaN when there
// is no previous reading.
func (c *Counters[K]) Rate(k K, v float64) float64 {
	inc, s, ok := c.Delta(k, v)
	if !ok {
		return math.NaN()
	}
	return inc / s
}

// End forgets every total not read this round.
func (c *Counters[K]) End() {
	for k, p := range c.prev {
		if p.round != c.round {
			delete(c.prev, k)
		}
	}
}

// Ratio is Δnum/Δden over one interval (the mean of a histogram from its
// _sum and _count), NaN when either has no base or nothing was observed.
func Ratio(dNum, dDen float64, ok bool) float64 {
	if !ok || dDen <= 0 {
		return math.NaN()
	}
	return dNum / dDen
}

// Bucket is one cumulative histogram bucket: the count of observations at
// or below UpperBound (+Inf for the last).
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Quantile estimates the q-quantile (0–1) of the observations that cumulative
// buckets hold, interpolating linearly inside the bucket it falls in, as
// Prometheus' histogram_quantile does; the +Inf bucket answers with the
// highest finite bound. NaN when the buckets hold no observations.
func Quantile(q float64, buckets []Bucket) float64 {
	if len(buckets) == 0 || q < 0 || q > 1 {
		return math.NaN()
	}
	b := append([]Bucket(nil), buckets...)
	sort.Slice(b, func(i, j int) bool { return b[i].UpperBound < b[j].UpperBound })
	total := b[len(b)-1].Count
	if !math.IsInf(b[len(b)-1].UpperBound, 1) || total <= 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(b), func(i int) bool { return b[i].Count >= rank })
	if i == len(b)-1 {
		if len(b) < 2 {
			return math.NaN()
		}
		return b[len(b)-2].UpperBound
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = b[i-1].UpperBound, b[i-1].Count
	}
	if b[i].Count == below {
		return b[i].UpperBound
	}
	return lower + (b[i].UpperBound-lower)*(rank-below)/(b[i].Count-below)
}
