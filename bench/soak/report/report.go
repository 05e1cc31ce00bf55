// Package report turns what a soak run recorded into docs/soak.md: the
// verdict on each of the targets, counts per outcome and per
// fault kind, recovery times, process health and charts over time, so
// that a reader can check the claims without rerunning the soak.
package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// LatePrefix starts the Kind of a request that waits on purpose (an async
// job polled 30–120 s after its submission): the latency chart leaves
// those out.
const LatePrefix = "late-"

// Thresholds of the targets. They live here, named, because the
// report prints them next to each verdict and the docs quote them.
const (
	// rssGrowthLimit is the "RSS growth < 5% after warm-up".
	rssGrowthLimit = 0.05
	// quietAfterFault is how long after a fault is lifted the system is
	// still considered disturbed: restarted peers reconnect, queues
	// drain and caches refill, so a sample taken then says nothing about
	// a leak.
	quietAfterFault = 20 * time.Second
	// minLifetime is the shortest span of quiet samples of one PID worth
	// comparing: over less, allocator noise and GC timing outweigh any
	// trend.
	minLifetime = 2 * time.Minute
	// rssWindow is how many quiet samples at each end of a lifetime the
	// growth compares, by their medians: one sample lands wherever the
	// collector happens to be in its cycle.
	rssWindow = 5
	// fdSlack is how many descriptors a process may hold above its
	// baseline and still count as back to it: a few keep-alive
	// connections and log files come and go with the load.
	fdSlack = 8
	// goroutineFactor and goroutineSlack bound goroutines "back to
	// baseline": last ≤ first×goroutineFactor + goroutineSlack, since
	// per-connection goroutines scale with whatever the load has open.
	goroutineFactor = 1.1
	goroutineSlack  = 10
)

// Input is everything a run hands to the report; the report reads
// nothing else, so the same Input always gives the same document.
type Input struct {
	Seed     int64
	Commit   string
	Duration time.Duration
	// Start and End bound the run; every time in the report is an
	// offset from Start.
	Start, End time.Time
	// Warmup is excluded from the growth targets: caches, pools and
	// lazily loaded models fill up during it by design.
	Warmup time.Duration
	// Topology is markdown describing what ran, written by the lead.
	Topology string
	// Command reproduces the run, e.g. "make soak SOAK_SEED=7".
	Command string
	Results []record.Result
	Faults  []record.Fault
	Samples []record.Sample
	// Orphans names processes left running after the run.
	Orphans []string
	// Notes are extra markdown lines from the lead, e.g. faults skipped
	// for lack of root.
	Notes []string
}

// Target is one of the targets with the run's evidence for it.
type Target struct {
	Goal, Measured string
	Met            bool
}

// Evaluate judges the run against the six targets, in the
// issue's order. A target with no evidence (no requests, no faults, no
// process measured) is not met: a run that did not exercise something
// must not claim it.
func Evaluate(in Input) []Target {
	in = normalize(in)
	return []Target{
		evalDefects(in),
		evalUnattributed(in),
		evalRecovery(in),
		evalRSS(in),
		evalBaseline(in),
		evalOrphans(in),
	}
}

// normalize fills in what a caller may leave out, so that offsets and
// chart axes stay meaningful.
func normalize(in Input) Input {
	if in.Start.IsZero() {
		in.Start = earliest(in)
	}
	if in.End.IsZero() && in.Duration > 0 && !in.Start.IsZero() {
		in.End = in.Start.Add(in.Duration)
	}
	if in.Duration == 0 && !in.End.IsZero() && !in.Start.IsZero() {
		in.Duration = in.End.Sub(in.Start)
	}
	return in
}

func earliest(in Input) time.Time {
	var t time.Time
	see := func(x time.Time) {
		if !x.IsZero() && (t.IsZero() || x.Before(t)) {
			t = x
		}
	}
	for _, r := range in.Results {
		see(r.Start)
	}
	for _, f := range in.Faults {
		see(f.Start)
	}
	for _, s := range in.Samples {
		see(s.At)
	}
	return t
}

func countOutcome(rs []record.Result, o record.Outcome) int {
	n := 0
	for _, r := range rs {
		if r.Outcome == o {
			n++
		}
	}
	return n
}

func evalDefects(in Input) Target {
	t := Target{Goal: "0 defects"}
	n := countOutcome(in.Results, record.Defect)
	if len(in.Results) == 0 {
		t.Measured = "no requests recorded"
		return t
	}
	t.Measured = fmt.Sprintf("%d defects in %d requests", n, len(in.Results))
	t.Met = n == 0
	return t
}

func evalUnattributed(in Input) Target {
	t := Target{Goal: "every clean failure attributable to an injected fault (0 unattributed)"}
	if len(in.Results) == 0 {
		t.Measured = "no requests recorded"
		return t
	}
	un := countOutcome(in.Results, record.Unattributed)
	clean := countOutcome(in.Results, record.CleanFail)
	t.Measured = fmt.Sprintf("%d of %d failures unattributed (%d attributed to a fault)", un, un+clean, clean)
	t.Met = un == 0
	return t
}

// recoveryRef is the instant recovery is measured from: when the fault
// was lifted, or, if it never was, when it was injected (stricter, and
// the only instant known).
func recoveryRef(f record.Fault) time.Time {
	if f.End.IsZero() {
		return f.Start
	}
	return f.End
}

func recovered(f record.Fault) (time.Duration, bool) {
	if f.Recovered.IsZero() {
		return 0, false
	}
	return f.Recovered.Sub(recoveryRef(f)), true
}

func evalRecovery(in Input) Target {
	t := Target{Goal: "recovery within its documented bound after every fault kind"}
	if len(in.Faults) == 0 {
		t.Measured = "no faults injected"
		return t
	}
	type tally struct{ n, never, late int }
	byKind := map[string]*tally{}
	for _, f := range in.Faults {
		k := byKind[f.Kind]
		if k == nil {
			k = &tally{}
			byKind[f.Kind] = k
		}
		k.n++
		switch d, ok := recovered(f); {
		case !ok:
			k.never++
		case d > f.Bound:
			k.late++
		}
	}
	var missed []string
	for _, kind := range sortedKeys(byKind) {
		k := byKind[kind]
		if k.never+k.late == 0 {
			continue
		}
		var why []string
		if k.never > 0 {
			why = append(why, fmt.Sprintf("%d never", k.never))
		}
		if k.late > 0 {
			why = append(why, fmt.Sprintf("%d late", k.late))
		}
		missed = append(missed, fmt.Sprintf("%s (%d of %d: %s)", kind, k.never+k.late, k.n, strings.Join(why, ", ")))
	}
	if len(missed) > 0 {
		t.Measured = "missed: " + strings.Join(missed, "; ")
		return t
	}
	// The closest call says more than "all fine": how near the bound it was.
	worst, ratio := record.Fault{}, -1.0
	for _, f := range in.Faults {
		d, _ := recovered(f)
		r := math.Inf(1)
		if f.Bound > 0 {
			r = float64(d) / float64(f.Bound)
		}
		if r > ratio {
			worst, ratio = f, r
		}
	}
	d, _ := recovered(worst)
	t.Measured = fmt.Sprintf("%d faults of %d kinds all recovered in bound; closest: %s on %s in %s (bound %s)",
		len(in.Faults), len(byKind), worst.Kind, worst.Target, fmtDur(d), fmtDur(worst.Bound))
	t.Met = true
	return t
}

// procStat is one process name's health over the run. First and Last
// are the first and last quiet samples of the one PID lifetime that the
// growth and baseline targets compare.
type procStat struct {
	Name      string
	Samples   int
	Restarts  int
	FDMax     int
	ConnsMax  int
	Measured  bool
	Skip      string // why not Measured
	PID       int
	First     record.Sample
	Last      record.Sample
	Lifetime  time.Duration
	RSSGrowth float64 // Last/First-1; NaN when RSS is unknown
	// AnonGrowth is the same for RSSAnon (NaN when unknown): it tells
	// memory kept from binary pages touched late.
	AnonGrowth float64
}

// quiet reports whether a sample at t can speak to leaks: past warm-up
// and away from every fault, whatever its target, since a fault on one
// component makes its peers retry, buffer and reconnect.
func quiet(in Input, t time.Time) bool {
	if t.Before(in.Start.Add(in.Warmup)) {
		return false
	}
	for _, f := range in.Faults {
		if f.Start.IsZero() || t.Before(f.Start) {
			continue
		}
		if f.End.IsZero() || !t.After(f.End.Add(quietAfterFault)) {
			return false
		}
	}
	return true
}

// procStats pairs samples within one PID lifetime, because a restarted
// process starts from scratch and comparing across PIDs would call a
// restart a leak or hide one.
func procStats(in Input) []procStat {
	byName := samplesByProc(in)
	var out []procStat
	for _, name := range sortedKeys(byName) {
		ss := byName[name]
		sortSamples(ss)
		st := procStat{Name: name, Samples: len(ss), FDMax: -1, ConnsMax: -1, RSSGrowth: math.NaN(), AnonGrowth: math.NaN()}
		pids := map[int][]record.Sample{}
		born := map[int]time.Time{}
		for _, s := range ss {
			st.FDMax = max(st.FDMax, s.FDs)
			st.ConnsMax = max(st.ConnsMax, s.Conns)
			if _, ok := born[s.PID]; !ok {
				born[s.PID] = s.At
			}
			// A process started mid-run warms up as the first one did.
			if quiet(in, s.At) && !s.At.Before(born[s.PID].Add(in.Warmup)) {
				pids[s.PID] = append(pids[s.PID], s)
			} else if _, ok := pids[s.PID]; !ok {
				pids[s.PID] = nil
			}
		}
		st.Restarts = max(len(pids)-1, 0)
		best, span := 0, time.Duration(-1)
		for _, pid := range sortedKeys(pids) {
			q := pids[pid]
			if len(q) == 0 {
				continue
			}
			d := q[len(q)-1].At.Sub(q[0].At)
			if d > span || (d == span && q[0].At.Before(pids[best][0].At)) {
				best, span = pid, d
			}
		}
		switch {
		case span < 0:
			st.Skip = "no quiet sample after warm-up"
		case span < minLifetime:
			st.Skip = fmt.Sprintf("longest quiet lifetime (pid %d) %s < %s", best, fmtDur(span), fmtDur(minLifetime))
		default:
			q := pids[best]
			st.Measured, st.PID, st.Lifetime = true, best, span
			st.First, st.Last = q[0], q[len(q)-1]
			st.First.RSS, st.Last.RSS = medianRSS(q[:min(len(q), rssWindow)]), medianRSS(q[max(len(q)-rssWindow, 0):])
			if st.First.RSS > 0 {
				st.RSSGrowth = float64(st.Last.RSS)/float64(st.First.RSS) - 1
			}
			anon := func(s record.Sample) int64 { return s.RSSAnon }
			st.First.RSSAnon, st.Last.RSSAnon = medianOf(q[:min(len(q), rssWindow)], anon), medianOf(q[max(len(q)-rssWindow, 0):], anon)
			if st.First.RSSAnon > 0 {
				st.AnonGrowth = float64(st.Last.RSSAnon)/float64(st.First.RSSAnon) - 1
			}
		}
		out = append(out, st)
	}
	return out
}

func skipped(ps []procStat) string {
	var s []string
	for _, p := range ps {
		if !p.Measured {
			s = append(s, fmt.Sprintf("%s (%s)", p.Name, p.Skip))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return "; skipped: " + strings.Join(s, ", ")
}

func evalRSS(in Input) Target {
	t := Target{Goal: fmt.Sprintf("RSS growth < %g%% after warm-up, per process", rssGrowthLimit*100)}
	ps := procStats(in)
	var worst *procStat
	var over []string
	n := 0
	for i := range ps {
		p := &ps[i]
		if !p.Measured || math.IsNaN(p.RSSGrowth) {
			continue
		}
		n++
		if worst == nil || p.RSSGrowth > worst.RSSGrowth {
			worst = p
		}
		if p.RSSGrowth >= rssGrowthLimit {
			over = append(over, fmt.Sprintf("%s %+.1f%%%s", p.Name, p.RSSGrowth*100, anonNote(*p)))
		}
	}
	if worst == nil {
		t.Measured = "no process measured" + skipped(ps)
		return t
	}
	t.Measured = fmt.Sprintf("worst: %s %+.1f%% (%.1f → %.1f MiB, pid %d over %s); %d of %d processes measured",
		worst.Name, worst.RSSGrowth*100, mib(worst.First.RSS), mib(worst.Last.RSS), worst.PID, fmtDur(worst.Lifetime), n, len(ps))
	if len(over) > 0 {
		t.Measured += "; over the limit: " + strings.Join(over, ", ")
	}
	t.Measured += skipped(ps)
	t.Met = len(over) == 0
	return t
}

func goroutineLimit(first int) float64 {
	return float64(first)*goroutineFactor + goroutineSlack
}

func evalBaseline(in Input) Target {
	t := Target{Goal: fmt.Sprintf("goroutines (≤ first×%g + %d) and descriptors (≤ first + %d) back to baseline at quiet points",
		goroutineFactor, goroutineSlack, fdSlack)}
	ps := procStats(in)
	var fdWorst, grWorst *procStat
	var fdEx, grEx float64
	var over []string
	n := 0
	for i := range ps {
		p := &ps[i]
		if !p.Measured {
			continue
		}
		n++
		if p.First.FDs >= 0 && p.Last.FDs >= 0 {
			ex := float64(p.Last.FDs - p.First.FDs - fdSlack)
			if fdWorst == nil || ex > fdEx {
				fdWorst, fdEx = p, ex
			}
			if ex > 0 {
				over = append(over, fmt.Sprintf("%s descriptors %d → %d", p.Name, p.First.FDs, p.Last.FDs))
			}
		}
		if p.First.Goroutines >= 0 && p.Last.Goroutines >= 0 {
			ex := float64(p.Last.Goroutines) - goroutineLimit(p.First.Goroutines)
			if grWorst == nil || ex > grEx {
				grWorst, grEx = p, ex
			}
			if ex > 0 {
				over = append(over, fmt.Sprintf("%s goroutines %d → %d", p.Name, p.First.Goroutines, p.Last.Goroutines))
			}
		}
	}
	if n == 0 {
		t.Measured = "no process measured" + skipped(ps)
		return t
	}
	var parts []string
	if fdWorst != nil {
		parts = append(parts, fmt.Sprintf("descriptors worst: %s %d → %d", fdWorst.Name, fdWorst.First.FDs, fdWorst.Last.FDs))
	} else {
		parts = append(parts, "descriptors unknown")
	}
	if grWorst != nil {
		parts = append(parts, fmt.Sprintf("goroutines worst: %s %d → %d (limit %.0f)",
			grWorst.Name, grWorst.First.Goroutines, grWorst.Last.Goroutines, math.Floor(goroutineLimit(grWorst.First.Goroutines))))
	} else {
		parts = append(parts, "goroutines not exposed")
	}
	parts = append(parts, fmt.Sprintf("%d of %d processes measured", n, len(ps)))
	if len(over) > 0 {
		parts = append(parts, "over: "+strings.Join(over, ", "))
	}
	t.Measured = strings.Join(parts, "; ") + skipped(ps)
	t.Met = len(over) == 0 && fdWorst != nil
	return t
}

func evalOrphans(in Input) Target {
	t := Target{Goal: "0 orphan processes"}
	if len(in.Orphans) == 0 {
		t.Measured, t.Met = "0", true
		return t
	}
	o := append([]string(nil), in.Orphans...)
	sort.Strings(o)
	t.Measured = fmt.Sprintf("%d: %s", len(o), strings.Join(o, ", "))
	return t
}

func sortSamples(ss []record.Sample) {
	sort.SliceStable(ss, func(i, j int) bool {
		a, b := ss[i], ss[j]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		if a.Proc != b.Proc {
			return a.Proc < b.Proc
		}
		return a.PID < b.PID
	})
}

func sortedKeys[K interface{ ~string | ~int }, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// fmtDur rounds to what a reader can use: milliseconds under a minute,
// tenths of a second above.
func fmtDur(d time.Duration) string {
	if d >= time.Minute || d <= -time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// samplesByProc groups the samples by process name.
func samplesByProc(in Input) map[string][]record.Sample {
	by := map[string][]record.Sample{}
	for _, s := range in.Samples {
		by[s.Proc] = append(by[s.Proc], s)
	}
	return by
}

// medianRSS is the median RSS of ss.
func medianRSS(ss []record.Sample) int64 {
	return medianOf(ss, func(s record.Sample) int64 { return s.RSS })
}

// medianOf is the median of f over ss.
func medianOf(ss []record.Sample, f func(record.Sample) int64) int64 {
	v := make([]int64, 0, len(ss))
	for _, s := range ss {
		v = append(v, f(s))
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// anonNote is " (anonymous +x%)" for a process whose RssAnon is known.
func anonNote(p procStat) string {
	if math.IsNaN(p.AnonGrowth) {
		return ""
	}
	return fmt.Sprintf(" (anonymous %+.1f%%)", p.AnonGrowth*100)
}
