package mortredhosts

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// at is an outcome that started off after t0, took lat and was answered
// code by version v.
func at(t0 time.Time, off, lat time.Duration, code int, v string) outcome {
	return outcome{start: t0.Add(off), latency: lat, code: code, version: v}
}

func TestAnalyzeSplitsByStart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	from, to := t0.Add(10*time.Second), t0.Add(13*time.Second)
	var outs []outcome
	// 100 steady requests of 1..100 ms.
	for i := range 100 {
		outs = append(outs, at(t0, time.Duration(i)*100*time.Millisecond, time.Duration(i+1)*time.Millisecond, 200, "v1"))
	}
	// The switch window is [from, to+2s]: both of its ends are in it.
	outs = append(outs,
		at(t0, 10*time.Second, 5*time.Millisecond, 200, "v1"),
		at(t0, 12*time.Second, 300*time.Millisecond, 200, "v2"),
		at(t0, 15*time.Second, 7*time.Millisecond, 200, "v2"),
		// After.
		at(t0, 15*time.Second+time.Millisecond, 2*time.Millisecond, 200, "v2"),
		at(t0, 20*time.Second, 0, 0, "").withErr("connection refused"),
	)
	st := analyze(outs, from, to, 2*time.Second, 30*time.Second)
	if st.total != 105 || st.failed != 1 {
		t.Fatalf("total %d failed %d, want 105 and 1", st.total, st.failed)
	}
	if st.steady.n != 100 || st.sw.n != 3 || st.after.n != 2 || st.all.n != 105 {
		t.Fatalf("phases steady %d switch %d after %d all %d, want 100 3 2 105", st.steady.n, st.sw.n, st.after.n, st.all.n)
	}
	if st.steady.p99 != 99*time.Millisecond || st.steady.p50 != 50*time.Millisecond || st.steady.max != 100*time.Millisecond {
		t.Errorf("steady p50 %v p99 %v max %v, want 50ms 99ms 100ms", st.steady.p50, st.steady.p99, st.steady.max)
	}
	if st.sw.p99 != 300*time.Millisecond {
		t.Errorf("switch p99 %v, want 300ms", st.sw.p99)
	}
	if got := st.ratio99(); got < 3.03 || got > 3.04 {
		t.Errorf("ratio %v, want 300/99", got)
	}
	// A failed request counts as the timeout, and in its phase.
	if st.after.failed != 1 || st.after.p99 != 30*time.Second {
		t.Errorf("after: failed %d p99 %v, want 1 and the 30s timeout", st.after.failed, st.after.p99)
	}
	if st.window != 5*time.Second {
		t.Errorf("window %v, want 5s", st.window)
	}
	if st.versions["v1"] != 101 || st.versions["v2"] != 3 || len(st.versions) != 2 {
		t.Errorf("versions %v", st.versions)
	}
	if len(st.firstFailures) != 1 || !strings.Contains(st.firstFailures[0], "+10.000 s after the rollout began: connection refused") {
		t.Errorf("failures %q", st.firstFailures)
	}
}

func (o outcome) withErr(e string) outcome { o.err = e; return o }

func TestAnalyzeCountsNon200AsFailed(t *testing.T) {
	t0 := time.Now()
	outs := []outcome{at(t0, 0, time.Millisecond, 503, "v1"), at(t0, time.Second, time.Millisecond, 200, "v1")}
	st := analyze(outs, t0.Add(time.Hour), t0.Add(time.Hour), 0, time.Minute)
	if st.failed != 1 || st.steady.failed != 1 || st.steady.max != time.Minute || st.versions["v1"] != 1 {
		t.Errorf("%+v", st)
	}
	if st.sw.n != 0 || st.sw.p99 != 0 || st.ratio99() != 0 {
		t.Errorf("an empty switch window: %+v ratio %v", st.sw, st.ratio99())
	}
}

func TestOpenLoopKeepsItsRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		l := openLoop{rate: 10, max: 1000, maxFor: time.Second, inflight: 100, call: func(ctx context.Context) (int, string, error) {
			calls.Add(1)
			time.Sleep(350 * time.Millisecond) // slower than the interval: open loop
			return 200, "v1", nil
		}}
		t0 := time.Now()
		outs := l.run(t.Context(), nil)
		if len(outs) != 10 || calls.Load() != 10 {
			t.Fatalf("%d outcomes, %d calls; want 10 in 1 s at 10/s", len(outs), calls.Load())
		}
		for i, o := range outs {
			if want := t0.Add(time.Duration(i) * 100 * time.Millisecond); !o.start.Equal(want) || o.latency != 350*time.Millisecond || o.failed() {
				t.Errorf("request %d: start +%v latency %v failed %v; want +%v", i, o.start.Sub(t0), o.latency, o.failed(), want.Sub(t0))
			}
		}
	})
}

func TestOpenLoopBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ok := func(ctx context.Context) (int, string, error) { return 200, "", nil }
		// The count.
		if outs := (openLoop{rate: 100, max: 7, maxFor: time.Hour, inflight: 10, call: ok}).run(t.Context(), nil); len(outs) != 7 {
			t.Errorf("max 7: %d outcomes", len(outs))
		}
		// stop.
		stop := make(chan struct{})
		time.AfterFunc(450*time.Millisecond, func() { close(stop) })
		if outs := (openLoop{rate: 10, max: 100, maxFor: time.Hour, inflight: 10, call: ok}).run(t.Context(), stop); len(outs) != 5 {
			t.Errorf("stopped at 450 ms: %d outcomes, want 5", len(outs))
		}
		// The in-flight cap: two wait, the next three are not sent.
		block := func(ctx context.Context) (int, string, error) {
			time.Sleep(time.Second)
			return 0, "", errors.New("timeout")
		}
		outs := (openLoop{rate: 10, max: 5, maxFor: time.Hour, inflight: 2, call: block}).run(t.Context(), nil)
		notSent := 0
		for _, o := range outs {
			if strings.HasPrefix(o.err, "not sent: 2 requests") {
				notSent++
			}
			if !o.failed() {
				t.Errorf("%v counts as served", o)
			}
		}
		if len(outs) != 5 || notSent != 3 {
			t.Errorf("%d outcomes, %d not sent; want 5 and 3", len(outs), notSent)
		}
	})
}
