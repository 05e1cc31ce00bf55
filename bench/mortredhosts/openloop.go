package mortredhosts

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

// outcome is one request of the open-loop load.
type outcome struct {
	start   time.Time
	latency time.Duration
	// code is the HTTP status, 0 when no answer came.
	code int
	// err is a transport error, or why the request was not sent.
	err string
	// version is the answer's X-Mortred-Version.
	version string
}

// failed: anything but a 200, or no answer at all.
func (o outcome) failed() bool { return o.err != "" || o.code != http.StatusOK }

func (o outcome) String() string {
	if o.err != "" {
		return o.err
	}
	return fmt.Sprintf("HTTP %d after %s ms", o.code, harness.Ms(o.latency))
}

// openLoop sends requests at a fixed rate whatever the answers take (a
// slow answer does not delay the next request, as it would in a closed
// loop), so a stall shows as latency, not as fewer requests.
type openLoop struct {
	// rate in requests per second.
	rate float64
	// max requests and maxFor bound the run in count and time.
	max    int
	maxFor time.Duration
	// inflight caps the requests waiting for an answer: one due while
	// that many wait is not sent and counts as failed.
	inflight int
	// call sends one request; its client's timeout bounds it.
	call func(ctx context.Context) (code int, version string, err error)
}

// run sends until stop is closed, ctx ends, max requests were due or
// maxFor has passed since the first; then it waits for the answers and
// returns every outcome in the order sent.
func (l openLoop) run(ctx context.Context, stop <-chan struct{}) []outcome {
	outs := make([]outcome, l.max)
	sem := make(chan struct{}, l.inflight)
	interval := time.Duration(float64(time.Second) / l.rate)
	var wg sync.WaitGroup
	t0 := time.Now()
	n := 0
send:
	for ; n < l.max; n++ {
		due := time.Duration(n) * interval
		if due >= l.maxFor {
			break
		}
		t := time.NewTimer(time.Until(t0.Add(due)))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			break send
		case <-ctx.Done():
			t.Stop()
			break send
		}
		select {
		case sem <- struct{}{}:
		default:
			outs[n] = outcome{start: time.Now(), err: fmt.Sprintf("not sent: %d requests already waiting for an answer", l.inflight)}
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			code, v, err := l.call(ctx)
			o := outcome{start: start, latency: time.Since(start), code: code, version: v}
			if err != nil {
				o.err = err.Error()
			}
			outs[i] = o
		}(n)
	}
	wg.Wait()
	return outs[:n]
}

// phase is the figures of the requests that started in one phase. A
// failed request counts in the percentiles as the slowest possible (the
// load's request timeout): it was not served.
type phase struct {
	n, failed     int
	p50, p99, max time.Duration
}

// rolloutStats is the rollout's load split by when each request started:
// steady before the rollout command, switch from its start until grace
// after its end, after from then on.
type rolloutStats struct {
	total, failed     int
	steady, sw, after phase
	all               phase
	// versions counts the answers that were served by version.
	versions      map[string]int
	firstFailures []string
	// window is the switch phase's length.
	window time.Duration
}

// maxListed is how many failures the report lists.
const maxListed = 5

// analyze splits outs by phase: [.., from) steady, [from, to+grace] the
// switch, (to+grace, ..] after; failedAs is a failed request's latency
// in the percentiles.
func analyze(outs []outcome, from, to time.Time, grace, failedAs time.Duration) rolloutStats {
	st := rolloutStats{versions: map[string]int{}}
	var lat [4][]time.Duration // steady, switch, after, all
	var fails [4]int
	end := to.Add(grace)
	for _, o := range outs {
		i := 0
		switch {
		case o.start.Before(from):
		case !o.start.After(end):
			i = 1
		default:
			i = 2
		}
		d := o.latency
		if o.failed() {
			d = failedAs
			fails[i]++
			fails[3]++
			if len(st.firstFailures) < maxListed {
				st.firstFailures = append(st.firstFailures, fmt.Sprintf("%s after the rollout began: %s", signedSec(o.start.Sub(from)), o))
			}
		} else {
			st.versions[o.version]++
		}
		lat[i] = append(lat[i], d)
		lat[3] = append(lat[3], d)
	}
	ps := make([]phase, 4)
	for i := range ps {
		ps[i] = phase{n: len(lat[i]), failed: fails[i], p50: harness.Pct(lat[i], 0.50), p99: harness.Pct(lat[i], 0.99), max: harness.Pct(lat[i], 1)}
	}
	st.steady, st.sw, st.after, st.all = ps[0], ps[1], ps[2], ps[3]
	st.total, st.failed = len(outs), fails[3]
	st.window = end.Sub(from)
	return st
}

// ratio99 is the switch's p99 over the steady phase's.
func (s rolloutStats) ratio99() float64 { return ratio(float64(s.sw.p99), float64(s.steady.p99)) }

// signedSec formats d in seconds with its sign, "+1.234 s".
func signedSec(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("−%.3f s", (-d).Seconds())
	}
	return fmt.Sprintf("+%.3f s", d.Seconds())
}
