package enginesim

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sampler feeds latency observations to the open sampling windows of
// latency_percentiles. With no window open an observation costs one atomic
// load.
type sampler struct {
	open    atomic.Int32
	mu      sync.Mutex
	windows map[*window]struct{}
}

// maxWindowSamples bounds one window's memory; later samples are counted
// as dropped rather than kept.
const maxWindowSamples = 1 << 20

type window struct {
	ttft, itl []float64
	dropped   int
}

type sampleKind uint8

const (
	sampleTTFT sampleKind = iota
	sampleITL
)

func (s *sampler) observe(k sampleKind, seconds float64) {
	if s.open.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.windows {
		dst := &w.ttft
		if k == sampleITL {
			dst = &w.itl
		}
		if len(*dst) >= maxWindowSamples {
			w.dropped++
			continue
		}
		*dst = append(*dst, seconds)
	}
}

// collect opens a window for d (or until ctx ends) and returns what it saw.
func (s *sampler) collect(ctx context.Context, d time.Duration) (*window, error) {
	w := &window{}
	s.mu.Lock()
	if s.windows == nil {
		s.windows = make(map[*window]struct{})
	}
	s.windows[w] = struct{}{}
	s.open.Add(1)
	s.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	var err error
	select {
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	delete(s.windows, w)
	s.open.Add(-1)
	s.mu.Unlock()
	return w, err
}

// percentiles are in seconds; zero when there were no samples.
type percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_s"`
	P90   float64 `json:"p90_s"`
	P99   float64 `json:"p99_s"`
	Max   float64 `json:"max_s"`
}

// summarize sorts v in place and reads nearest-rank percentiles.
func summarize(v []float64) percentiles {
	if len(v) == 0 {
		return percentiles{}
	}
	slices.Sort(v)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return v[min(max(i, 0), len(v)-1)]
	}
	return percentiles{Count: len(v), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: v[len(v)-1]}
}
