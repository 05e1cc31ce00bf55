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
	knee   int           // --decode-knee, fixed at start
}

func newLatency(ttft, itl time.Duration, jitter float64, knee int) *latency {
	l := &latency{knee: knee}
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

// fixed is the fixed part of the time to first token after an admission
// (--ttft), spread by the jitter with the request's own random source. The
// prefill of the uncached tokens comes on top (scheduler.prefillCost).
func (l *latency) fixed(rng *rand.Rand) time.Duration {
	return l.spread(time.Duration(l.ttft.Load()), rng)
}

// decode is the wait before the next token in a running batch of batch
// requests: ITL × (1 + others/knee), where others are the batch's other
// requests, so a request alone decodes at exactly --itl and a batch of
// knee+1 at twice it. knee 0 turns the slowdown off.
func (l *latency) decode(batch int, rng *rand.Rand) time.Duration {
	base := time.Duration(l.itl.Load())
	if l.knee > 0 && batch > 1 {
		base = time.Duration(float64(base) * (1 + float64(batch-1)/float64(l.knee)))
	}
	return l.spread(base, rng)
}

func (l *latency) spread(base time.Duration, rng *rand.Rand) time.Duration {
	j := math.Float64frombits(l.jitter.Load())
	if base <= 0 || j == 0 {
		return max(base, 0)
	}
	f := 1 + j*(2*rng.Float64()-1)
	return time.Duration(float64(base) * f)
}
