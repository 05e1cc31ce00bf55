package enginesim

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// latency holds the timing the engine plays, changeable at run time
// (set_latency) without locks: each token step reads the current values.
type latency struct {
	ttft   atomic.Int64  // time.Duration
	itl    atomic.Int64  // time.Duration
	jitter atomic.Uint64 // math.Float64bits of a fraction in [0, 1]
}

func newLatency(ttft, itl time.Duration, jitter float64) *latency {
	l := &latency{}
	l.set(ttft, itl, jitter)
	return l
}

func (l *latency) set(ttft, itl time.Duration, jitter float64) {
	l.ttft.Store(int64(ttft))
	l.itl.Store(int64(itl))
	l.jitter.Store(math.Float64bits(jitter))
}

type latencySettings struct {
	TTFT   time.Duration
	ITL    time.Duration
	Jitter float64
}

func (l *latency) get() latencySettings {
	return latencySettings{
		TTFT:   time.Duration(l.ttft.Load()),
		ITL:    time.Duration(l.itl.Load()),
		Jitter: math.Float64frombits(l.jitter.Load()),
	}
}

// delay is the wait before the next token: TTFT after a prefill, else ITL,
// spread by the jitter with the request's own random source.
func (l *latency) delay(prefill bool, rng *rand.Rand) time.Duration {
	base := time.Duration(l.itl.Load())
	if prefill {
		base = time.Duration(l.ttft.Load())
	}
	j := math.Float64frombits(l.jitter.Load())
	if base <= 0 || j == 0 {
		return max(base, 0)
	}
	f := 1 + j*(2*rng.Float64()-1)
	return time.Duration(float64(base) * f)
}
