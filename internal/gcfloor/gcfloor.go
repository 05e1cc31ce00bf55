// Package gcfloor keeps the garbage collector from running dozens of
// times a second while the live heap is small.
//
// With GOGC=100 the collector runs each time the heap doubles. The
// router's live heap is a few MiB, and every proxied request allocates
// several KiB (net/http's request, header maps, contexts, the upstream
// request), so at 10k small requests/s it ran about 45 cycles a second,
// each scanning every connection's goroutine stacks. A model server's Go
// heap is smaller still (the model's memory is ONNX Runtime's), while
// every item allocates its decoded image and input tensor: at the PP-OCR
// classifier's rates it collected about 100 times a second. Raising GOGC while
// the live heap is below the floor makes the floor the heap goal instead:
// fewer cycles of the same cost. Once the live heap is large (thousands
// of open streams) GOGC is back at its base value, so the floor costs at
// most its own size in resident memory, never a multiple of a large heap.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// DefaultFloor is the heap goal kept while the live heap is small.
const DefaultFloor = 32 << 20

// heapMinimum is the runtime's smallest heap goal at GOGC=100; the
// runtime scales it with GOGC, so a raised GOGC raises it too.
const heapMinimum = 4 << 20

// Percent is the GOGC that makes the heap goal about floor for a live
// heap of live bytes, never below base. The runtime's goal is the larger
// of live × (1 + GOGC/100) and heapMinimum × GOGC/100.
func Percent(live, floor uint64, base int) int {
	if live+live*uint64(max(base, 0))/100 >= floor {
		return base
	}
	p := floor * 100 / heapMinimum // the goal a tiny heap gets
	if live > 0 {
		p = min(p, (floor-live)*100/live)
	}
	return max(int(p), base)
}

// Auto starts a Tuner with DefaultFloor over the runtime's default GOGC
// (100), unless the process environment sets GOGC: the runtime has read
// it, and an operator's value (100 included) wins over the floor. It
// returns nil then; Stop on nil does nothing.
func Auto() *Tuner {
	if _, set := os.LookupEnv("GOGC"); set {
		return nil
	}
	return Start(DefaultFloor, 100)
}

// Tuner re-tunes GOGC after every collection. Create it with Start.
type Tuner struct {
	floor uint64
	base  int
	// mu orders adjust and Stop: a cleanup running late must not undo
	// Stop.
	mu      sync.Mutex
	stopped bool
	sample  []metrics.Sample
	// current is the GOGC last set.
	current atomic.Int64
}

// Start tunes GOGC after each collection so that the heap goal is at
// least floor bytes (0: DefaultFloor), with base as the GOGC of a large
// heap. Stop restores base.
func Start(floor uint64, base int) *Tuner {
	if floor == 0 {
		floor = DefaultFloor
	}
	t := &Tuner{floor: floor, base: base,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.adjust()
	t.arm()
	return t
}

// sentinel is garbage whose cleanup runs after the cycle that collects
// it; each run arms a new one, so the tuner runs once per cycle. It holds
// a pointer so that it is not a tiny allocation (whose cleanup may never
// run).
type sentinel struct{ _ *byte }

func (t *Tuner) arm() {
	runtime.AddCleanup(&sentinel{}, func(t *Tuner) {
		if t.adjust() {
			t.arm()
		}
	}, t)
}

// adjust sets GOGC from the live heap the last cycle marked; false once
// stopped.
func (t *Tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := Percent(live, t.floor, t.base)
	if int64(p) != t.current.Load() {
		t.current.Store(int64(p))
		debug.SetGCPercent(p)
	}
	return true
}

// Percent is the GOGC the tuner last set.
func (t *Tuner) Percent() int { return int(t.current.Load()) }

// Stop ends the tuning and sets GOGC back to base.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.base)
		t.current.Store(int64(t.base))
	}
}
