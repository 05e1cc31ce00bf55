package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		base, want  int
	}{
		{8 * mib, 32 * mib, 100, 300},   // goal 8 + 24 MiB
		{2 * mib, 32 * mib, 100, 800},   // heapMinimum × 8 = 32 MiB
		{16 * mib, 32 * mib, 100, 100},  // base reaches the floor
		{500 * mib, 32 * mib, 100, 100}, // a large heap: base
		{12 * mib, 32 * mib, 200, 200},
		{0, 32 * mib, 100, 800},
		{0, 2 * mib, 100, 100}, // a floor under the runtime's minimum: base
	} {
		if got := Percent(c.live, c.floor, c.base); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.floor, c.base, got, c.want)
		}
	}
}

// gogc is the runtime's GOGC now.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// waitPercent runs collections until the tuner has set want, within a
// generous bound.
func waitPercent(t *testing.T, tu *Tuner, want func(int) bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		runtime.GC()
		if p := tu.Percent(); want(p) && gogc() == p {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tuner at %d, runtime GOGC %d", tu.Percent(), gogc())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTunerFollowsLiveHeap: a small live heap gets a raised GOGC, a live
// heap above the floor the base one, and Stop restores the base.
func TestTunerFollowsLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const floor = 32 << 20
	tu := Start(floor, 100)
	defer tu.Stop()
	waitPercent(t, tu, func(p int) bool { return p > 100 })

	big := make([]byte, floor) // live: over half the floor
	for i := range big {
		big[i] = 1
	}
	waitPercent(t, tu, func(p int) bool { return p == 100 })
	runtime.KeepAlive(big)
	big = nil

	waitPercent(t, tu, func(p int) bool { return p > 100 })
	tu.Stop()
	if g := gogc(); g != 100 {
		t.Fatalf("GOGC after Stop = %d, want 100", g)
	}
}
