package enginesim

import (
	"math/rand/v2"
	"sync"
)

// failer decides which generation requests get an injected 500. The n-th
// decision depends only on the seed, so a run with the same --seed and the
// same request order fails the same requests.
type failer struct {
	rate float64
	mu   sync.Mutex
	rng  *rand.Rand
}

func newFailer(rate float64, seed uint64) *failer {
	return &failer{rate: rate, rng: rand.New(rand.NewPCG(seed, 0x6661696c))}
}

func (f *failer) fail() bool {
	if f.rate <= 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64() < f.rate
}
