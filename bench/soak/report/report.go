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
	// drain and caches refill, so a count of goroutines or descriptors
	// taken then says nothing about a leak.
	quietAfterFault = 20 * time.Second
	// minLifetime is the shortest span of one PID's samples worth
	// judging (quiet ones for goroutines and descriptors, all past
	// warm-up for RSS): over less, allocator noise and GC timing
	// outweigh any trend.
	minLifetime = 2 * time.Minute
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
	return evaluate(in, procStats(in))
}

// evaluate is Evaluate over a normalized in and its procStats, which the
// caller computes once for every reader (the RSS trends are O(n²)).
func evaluate(in Input, ps []procStat) []Target {
	return []Target{
		evalDefects(in),
		evalUnattributed(in),
		evalRecovery(in),
		evalRSS(ps),
		evalBaseline(ps),
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

// procStat is one process name's health over the run. Memory and the
// baseline are judged on lifetimes chosen apart, by different samples,
// so they may be different PIDs of the process.
type procStat struct {
	Name     string
	Samples  int
	Restarts int
	FDMax    int
	ConnsMax int
	Mem      memStat
	Base     baseStat
}

// lifetime is the PID a target is judged on, or why none is.
type lifetime struct {
	Measured bool
	Skip     string // why not Measured
	PID      int
	// Span is from the first to the last sample judged.
	Span time.Duration
}

// memStat is RSS growth, judged on every sample of a PID past the run's
// warm-up and its own, not only quiet ones. RSS is a level, not an
// event: faults come all through the run, so they tilt no trend, while
// the collector's sawtooth (the soak's small Go processes swing by a
// tenth or more between collections) is only seen through with many
// samples, which the sparse quiet points are not.
type memStat struct {
	lifetime
	// First and Last are the Theil–Sen trend of RSS at the span's ends,
	// in bytes, not samples; Growth is Last/First-1, NaN when RSS is
	// unknown.
	First, Last, Growth float64
	// AnonFirst, AnonLast and AnonGrowth are the same for RSSAnon: it
	// tells memory kept from pages of the binary touched late.
	AnonFirst, AnonLast, AnonGrowth float64
}

// baseStat is goroutines and descriptors, whose target is "back to
// baseline at quiet points": First and Last are the first and last
// quiet samples of the PID with the longest span of them.
type baseStat struct {
	lifetime
	First, Last record.Sample
}

// quiet reports whether a sample at t can speak to leaks of goroutines
// and descriptors: past warm-up and away from every fault, whatever its
// target, since a fault on one component makes its peers retry, buffer
// and reconnect.
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

// procStats judges samples within one PID lifetime, because a restarted
// process starts from scratch and comparing across PIDs would call a
// restart a leak or hide one.
func procStats(in Input) []procStat {
	byName := samplesByProc(in)
	var out []procStat
	for _, name := range sortedKeys(byName) {
		ss := byName[name]
		sortSamples(ss)
		st := procStat{Name: name, Samples: len(ss), FDMax: -1, ConnsMax: -1}
		// warm and calm hold, per PID, the samples past warm-up (for
		// RSS) and the quiet ones among them (for the baseline).
		warm := map[int][]record.Sample{}
		calm := map[int][]record.Sample{}
		born := map[int]time.Time{}
		for _, s := range ss {
			st.FDMax = max(st.FDMax, s.FDs)
			st.ConnsMax = max(st.ConnsMax, s.Conns)
			if _, ok := born[s.PID]; !ok {
				born[s.PID] = s.At
			}
			// A process started mid-run warms up as the first one did.
			if s.At.Before(in.Start.Add(in.Warmup)) || s.At.Before(born[s.PID].Add(in.Warmup)) {
				continue
			}
			warm[s.PID] = append(warm[s.PID], s)
			if quiet(in, s.At) {
				calm[s.PID] = append(calm[s.PID], s)
			}
		}
		// A PID seen only in its warm-up is a restart all the same.
		st.Restarts = max(len(born)-1, 0)

		var q []record.Sample
		st.Base.lifetime, q = longest(calm, "quiet sample", "quiet lifetime")
		if st.Base.Measured {
			st.Base.First, st.Base.Last = q[0], q[len(q)-1]
		}
		st.Mem.lifetime, q = longest(warm, "sample", "lifetime")
		st.Mem.Growth, st.Mem.AnonGrowth = math.NaN(), math.NaN()
		if st.Mem.Measured {
			st.Mem.First, st.Mem.Last, st.Mem.Growth = trend(q, func(s record.Sample) int64 { return s.RSS })
			st.Mem.AnonFirst, st.Mem.AnonLast, st.Mem.AnonGrowth = trend(q, func(s record.Sample) int64 { return s.RSSAnon })
		}
		out = append(out, st)
	}
	return out
}

// longest picks the PID whose samples span longest (the earliest on a
// tie), and says why none is judged when there is no sample or that span
// is under minLifetime; sample and life name what was looked for.
func longest(pids map[int][]record.Sample, sample, life string) (lifetime, []record.Sample) {
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
		return lifetime{Skip: "no " + sample + " after warm-up"}, nil
	case span < minLifetime:
		return lifetime{PID: best, Span: span,
			Skip: fmt.Sprintf("longest %s (pid %d) %s < %s", life, best, fmtDur(span), fmtDur(minLifetime))}, nil
	}
	return lifetime{Measured: true, PID: best, Span: span}, pids[best]
}

// trend fits a Theil–Sen line to f over ss (time-ordered) and returns
// it at the first and last sample's instants, and the growth between
// them (NaN when f is unknown). Every sample weighs in, so where in its
// cycle the collector was at either end does not matter, as it does to
// a comparison of the ends (even of medians of a few samples there);
// and the median of the pairwise slopes shrugs off odd readings, up to
// about three in ten, where a least-squares line would follow them. A
// reading of 0 is a value the kernel did not give, not a level, and is
// left out.
func trend(ss []record.Sample, f func(record.Sample) int64) (first, last, growth float64) {
	var x, y []float64
	for _, s := range ss {
		if v := f(s); v > 0 {
			x = append(x, s.At.Sub(ss[0].At).Seconds())
			y = append(y, float64(v))
		}
	}
	a, b, ok := theilSen(x, y)
	if !ok {
		return 0, 0, math.NaN()
	}
	first, last = a, a+b*ss[len(ss)-1].At.Sub(ss[0].At).Seconds()
	if first <= 0 {
		return first, last, math.NaN()
	}
	return first, last, last/first - 1
}

// theilSen fits y = a + b·x: b is the median of the slopes between every
// two points with distinct x, a the median of y - b·x. It is O(n²) in
// time and memory: a 30-minute run gives ~900 samples of a process,
// ~400k slopes. ok is false without two distinct x.
func theilSen(x, y []float64) (a, b float64, ok bool) {
	slopes := make([]float64, 0, len(x)*(len(x)-1)/2)
	for i := range x {
		for j := i + 1; j < len(x); j++ {
			if x[j] != x[i] {
				slopes = append(slopes, (y[j]-y[i])/(x[j]-x[i]))
			}
		}
	}
	if len(slopes) == 0 {
		return 0, 0, false
	}
	b = medianFloat(slopes)
	res := make([]float64, len(x))
	for i := range x {
		res[i] = y[i] - b*x[i]
	}
	return medianFloat(res), b, true
}

// medianFloat is the median of v, the mean of the middle two for an even
// count; it sorts v.
func medianFloat(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// skipped lists the processes a target could not judge, with why.
func skipped(ps []procStat, lt func(procStat) lifetime) string {
	var s []string
	for _, p := range ps {
		if l := lt(p); !l.Measured {
			s = append(s, fmt.Sprintf("%s (%s)", p.Name, l.Skip))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return "; skipped: " + strings.Join(s, ", ")
}

func memLifetime(p procStat) lifetime  { return p.Mem.lifetime }
func baseLifetime(p procStat) lifetime { return p.Base.lifetime }

func evalRSS(ps []procStat) Target {
	t := Target{Goal: fmt.Sprintf("RSS growth < %g%% after warm-up, per process", rssGrowthLimit*100)}
	var worst *procStat
	var over []string
	n := 0
	for i := range ps {
		p := &ps[i]
		if !p.Mem.Measured || math.IsNaN(p.Mem.Growth) {
			continue
		}
		n++
		if worst == nil || p.Mem.Growth > worst.Mem.Growth {
			worst = p
		}
		if p.Mem.Growth >= rssGrowthLimit {
			over = append(over, fmt.Sprintf("%s %+.1f%%%s", p.Name, p.Mem.Growth*100, anonNote(*p)))
		}
	}
	if worst == nil {
		t.Measured = "no process measured" + skipped(ps, memLifetime)
		return t
	}
	t.Measured = fmt.Sprintf("worst: %s %+.1f%% (trend %.1f → %.1f MiB, pid %d over %s); %d of %d processes measured",
		worst.Name, worst.Mem.Growth*100, mib(worst.Mem.First), mib(worst.Mem.Last), worst.Mem.PID, fmtDur(worst.Mem.Span), n, len(ps))
	if len(over) > 0 {
		t.Measured += "; over the limit: " + strings.Join(over, ", ")
	}
	t.Measured += skipped(ps, memLifetime)
	t.Met = len(over) == 0
	return t
}

func goroutineLimit(first int) float64 {
	return float64(first)*goroutineFactor + goroutineSlack
}

func evalBaseline(ps []procStat) Target {
	t := Target{Goal: fmt.Sprintf("goroutines (≤ first×%g + %d) and descriptors (≤ first + %d) back to baseline at quiet points",
		goroutineFactor, goroutineSlack, fdSlack)}
	var fdWorst, grWorst *procStat
	var fdEx, grEx float64
	var over []string
	n := 0
	for i := range ps {
		p := &ps[i]
		if !p.Base.Measured {
			continue
		}
		n++
		if p.Base.First.FDs >= 0 && p.Base.Last.FDs >= 0 {
			ex := float64(p.Base.Last.FDs - p.Base.First.FDs - fdSlack)
			if fdWorst == nil || ex > fdEx {
				fdWorst, fdEx = p, ex
			}
			if ex > 0 {
				over = append(over, fmt.Sprintf("%s descriptors %d → %d", p.Name, p.Base.First.FDs, p.Base.Last.FDs))
			}
		}
		if p.Base.First.Goroutines >= 0 && p.Base.Last.Goroutines >= 0 {
			ex := float64(p.Base.Last.Goroutines) - goroutineLimit(p.Base.First.Goroutines)
			if grWorst == nil || ex > grEx {
				grWorst, grEx = p, ex
			}
			if ex > 0 {
				over = append(over, fmt.Sprintf("%s goroutines %d → %d", p.Name, p.Base.First.Goroutines, p.Base.Last.Goroutines))
			}
		}
	}
	if n == 0 {
		t.Measured = "no process measured" + skipped(ps, baseLifetime)
		return t
	}
	var parts []string
	if fdWorst != nil {
		parts = append(parts, fmt.Sprintf("descriptors worst: %s %d → %d", fdWorst.Name, fdWorst.Base.First.FDs, fdWorst.Base.Last.FDs))
	} else {
		parts = append(parts, "descriptors unknown")
	}
	if grWorst != nil {
		parts = append(parts, fmt.Sprintf("goroutines worst: %s %d → %d (limit %.0f)",
			grWorst.Name, grWorst.Base.First.Goroutines, grWorst.Base.Last.Goroutines, math.Floor(goroutineLimit(grWorst.Base.First.Goroutines))))
	} else {
		parts = append(parts, "goroutines not exposed")
	}
	parts = append(parts, fmt.Sprintf("%d of %d processes measured", n, len(ps)))
	if len(over) > 0 {
		parts = append(parts, "over: "+strings.Join(over, ", "))
	}
	t.Measured = strings.Join(parts, "; ") + skipped(ps, baseLifetime)
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

func mib[T int64 | float64](b T) float64 { return float64(b) / (1 << 20) }

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

// anonNote is " (anonymous +x%)" for a process whose RssAnon is known.
func anonNote(p procStat) string {
	if math.IsNaN(p.Mem.AnonGrowth) {
		return ""
	}
	return fmt.Sprintf(" (anonymous %+.1f%%)", p.Mem.AnonGrowth*100)
}
