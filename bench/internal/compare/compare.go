// Package compare measures several paths to the same server with the same
// wrk load, with the CPU time each process involved spent, and renders
// the comparison against a baseline path as ratios.
package compare

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/internal/wrk"
)

// Proc is a process whose CPU time is charged to every request.
type Proc struct {
	Label string
	PID   int
}

// Path is one way to the server.
type Path struct {
	Name    string
	URL     string
	Headers map[string]string
	// Procs are the processes to account CPU for; a column per label.
	Procs []Proc
}

// Measured is one wrk run and the CPU each process used during it.
type Measured struct {
	wrk.Result
	CPU map[string]time.Duration
}

// Run measures one path with o (its URL and headers are the path's).
func Run(ctx context.Context, dir string, p Path, o wrk.Opts) (Measured, error) {
	// A copy: wrk.Run fills in its default headers.
	o.URL, o.Headers = p.URL, maps.Clone(p.Headers)
	before := map[string]time.Duration{}
	for _, pr := range p.Procs {
		before[pr.Label] = cpu(pr.PID)
	}
	r, err := wrk.Run(ctx, dir, o)
	if err != nil {
		return Measured{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	m := Measured{Result: r, CPU: map[string]time.Duration{}}
	for _, pr := range p.Procs {
		m.CPU[pr.Label] = cpu(pr.PID) - before[pr.Label]
	}
	return m, nil
}

func cpu(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	d, _ := harness.CPUTime(pid)
	return d
}

// Agg is the median of each figure over rounds.
type Agg struct {
	RPS      float64
	P50, P99 time.Duration
	Errors   int64
	// Bound is set when a run hit its request budget (RPS is then a
	// lower bound).
	Bound string
	// CPUus is CPU µs per request by process label.
	CPUus map[string]float64
	// Refused counts answers that were not 2xx or 3xx, and FirstBad is
	// one of them (status and the start of its body).
	Refused  int64
	FirstBad string
}

// Aggregate takes the median over rounds; errors are summed.
func Aggregate(rs []Measured) Agg {
	var rps, p50, p99 []float64
	per := map[string][]float64{}
	a := Agg{CPUus: map[string]float64{}}
	for _, r := range rs {
		rps = append(rps, r.RPS())
		p50 = append(p50, float64(r.P50))
		p99 = append(p99, float64(r.P99))
		a.Errors += r.Errors + r.Status
		a.Refused += r.Status
		if a.FirstBad == "" {
			a.FirstBad = r.FirstBad
		}
		if r.BudgetHit {
			a.Bound = " (≥, budget hit)"
		}
		if r.Requests > 0 {
			for k, v := range r.CPU {
				per[k] = append(per[k], float64(v.Microseconds())/float64(r.Requests))
			}
		}
	}
	a.RPS, a.P50, a.P99 = harness.Median(rps), time.Duration(harness.Median(p50)), time.Duration(harness.Median(p99))
	for k, v := range per {
		a.CPUus[k] = harness.Median(v)
	}
	return a
}

// Table renders one load's paths against the baseline (the first name):
// req/s, p50, p99, errors, ratios, added p50, and CPU µs/req per label
// ("–" where a path does not involve that process).
func Table(names []string, aggs map[string]Agg, cpuLabels []string) string {
	base := aggs[names[0]]
	head := []string{"path", "req/s", "p50 ms", "p99 ms", "errors", "req/s ÷ " + names[0], "p50 ÷ " + names[0], "added p50 ms"}
	for _, l := range cpuLabels {
		head = append(head, l+" CPU µs/req")
	}
	var rows [][]string
	for _, n := range names {
		a := aggs[n]
		row := []string{n, fmt.Sprintf("%.0f%s", a.RPS, a.Bound), harness.Ms(a.P50), harness.Ms(a.P99), fmt.Sprint(a.Errors),
			harness.Ratio(a.RPS, base.RPS), harness.Ratio(float64(a.P50), float64(base.P50)), SignedMs(a.P50 - base.P50)}
		for _, l := range cpuLabels {
			if v, ok := a.CPUus[l]; ok {
				row = append(row, fmt.Sprintf("%.1f", v))
			} else {
				row = append(row, "–")
			}
		}
		rows = append(rows, row)
	}
	return harness.Table(head, rows, true)
}

// SignedMs formats d in ms with its sign.
func SignedMs(d time.Duration) string {
	if d >= 0 {
		return "+" + harness.Ms(d)
	}
	return "−" + harness.Ms(-d)
}

// CPUNote explains the CPU columns.
const CPUNote = "CPU µs/req is a process's user+system CPU time over the run (from /proc/<pid>/stat, 10 ms ticks) divided by the " +
	"requests answered: where a path's time goes when the shared core is the limit.\n"

// Limit explains a proxied path's throughput on a shared core: the proxy
// and the server behind it split one CPU, so the path can reach at most
// server ÷ (proxy + server) of the direct path's requests per second.
func Limit(name string, a Agg, proxy, server string, direct Agg) string {
	p, s := a.CPUus[proxy], a.CPUus[server]
	if p+s == 0 || direct.CPUus[server] == 0 {
		return ""
	}
	return fmt.Sprintf("%s: %.1f µs of %s CPU beside %.1f µs of %s CPU per request, on one shared core, caps it near %.0f%% of direct "+
		"(measured %.0f%%).", name, p, proxy, s, server, 100*direct.CPUus[server]/(p+s), 100*a.RPS/direct.RPS)
}
