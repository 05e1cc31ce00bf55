package report

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

const (
	// maxListed caps the defect and unattributed tables: past a few
	// dozen the rows repeat one cause and bury the rest of the report.
	maxListed = 30
	// maxDetail keeps one failure to one readable table row.
	maxDetail = 160
)

var outcomes = []record.Outcome{record.Served, record.CleanFail, record.Unattributed, record.Defect}

// Write writes the markdown report to mdPath and its charts next to it,
// in <mdPath without extension>-charts/, linked relatively so the docs
// tree can move as a whole.
func Write(in Input, mdPath string) error {
	in = normalize(in)
	chartDir := strings.TrimSuffix(mdPath, filepath.Ext(mdPath)) + "-charts"
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		return err
	}
	if dir := filepath.Dir(mdPath); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	charts, err := writeCharts(in, chartDir)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	markdown(&b, in, path.Base(filepath.ToSlash(chartDir)), charts)
	return os.WriteFile(mdPath, b.Bytes(), 0o644)
}

// chartResult is one chart as the markdown links it: the file name when
// drawn, or why it was not.
type chartResult struct {
	Title, File, Skipped string
}

// writeCharts draws every chart, removing a stale file left by an
// earlier run when a chart is skipped so the directory matches the
// report.
func writeCharts(in Input, dir string) ([]chartResult, error) {
	var out []chartResult
	for _, c := range chartSpecs(in) {
		file := filepath.Join(dir, c.file)
		if len(c.series) == 0 {
			if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			out = append(out, chartResult{Title: c.title, Skipped: c.empty})
			continue
		}
		if err := drawChart(file, c, in); err != nil {
			return nil, fmt.Errorf("chart %s: %w", c.file, err)
		}
		out = append(out, chartResult{Title: c.title, File: c.file})
	}
	return out, nil
}

func markdown(b *bytes.Buffer, in Input, chartDir string, charts []chartResult) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	commit := in.Commit
	if commit == "" {
		commit = "unknown"
	}
	start := "unknown"
	if !in.Start.IsZero() {
		start = in.Start.UTC().Format(time.RFC3339)
	}
	p("# Soak report\n\n")
	p("Commit `%s`, seed %d, duration %s, started %s, warm-up %s.\n\n", commit, in.Seed, fmtDur(in.Duration), start, fmtDur(in.Warmup))

	p("## Targets\n\n| Goal | Measured | Met |\n|---|---|---|\n")
	ps := procStats(in)
	for _, t := range evaluate(in, ps) {
		mark := "❌"
		if t.Met {
			mark = "✅"
		}
		p("| %s | %s | %s |\n", cell(t.Goal), cell(t.Measured), mark)
	}

	p("\n## What ran\n\n")
	if s := strings.TrimSpace(in.Topology); s != "" {
		p("%s\n", s)
	} else {
		p("Not described.\n")
	}
	p("\n## How to reproduce\n\n")
	if s := strings.TrimSpace(in.Command); s != "" {
		p("```sh\n%s\n```\n", s)
	} else {
		p("Not given.\n")
	}

	writeOutcomes(b, in)
	writeFaults(b, in)
	p("\n## Over time\n\n")
	p("x: seconds since the start; shaded spans are faults from injection to lifting, with a line at injection.\n\n")
	for i, c := range charts {
		if i > 0 {
			p("\n")
		}
		if c.File == "" {
			p("_%s: chart skipped, %s._\n", c.Title, c.Skipped)
			continue
		}
		p("![%s](%s/%s)\n", c.Title, url.PathEscape(chartDir), c.File)
	}
	writeFailures(b, in)
	writeHealth(b, ps)

	p("\n## Orphans\n\n")
	if len(in.Orphans) == 0 {
		p("None.\n")
	} else {
		o := append([]string(nil), in.Orphans...)
		sort.Strings(o)
		for _, s := range o {
			p("- %s\n", oneLine(s))
		}
	}
	if len(in.Notes) > 0 {
		p("\n## Notes\n\n")
		for _, n := range in.Notes {
			p("- %s\n", strings.TrimSpace(n))
		}
	}
}

func writeOutcomes(b *bytes.Buffer, in Input) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("\n## Outcomes\n\n")
	if len(in.Results) == 0 {
		p("No requests recorded.\n")
		return
	}
	counts := map[string]map[record.Outcome]int{}
	total := map[record.Outcome]int{}
	for _, r := range in.Results {
		m := counts[r.Kind]
		if m == nil {
			m = map[record.Outcome]int{}
			counts[r.Kind] = m
		}
		m[r.Outcome]++
		total[r.Outcome]++
	}
	p("| Kind |")
	for _, o := range outcomes {
		p(" %s |", o)
	}
	p(" Total |\n|---|%s---:|\n", strings.Repeat("---:|", len(outcomes)))
	row := func(name string, m map[record.Outcome]int) {
		p("| %s |", name)
		n := 0
		for _, o := range outcomes {
			p(" %d |", m[o])
			n += m[o]
		}
		// Outcomes outside the known four still count toward the total.
		for o, c := range m {
			if o < record.Served || o > record.Defect {
				n += c
			}
		}
		p(" %d |\n", n)
	}
	for _, k := range sortedKeys(counts) {
		row(cell(k), counts[k])
	}
	row("**total**", total)
}

func writeFaults(b *bytes.Buffer, in Input) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("\n## Faults\n\n")
	if len(in.Faults) == 0 {
		p("No faults injected.\n")
		return
	}
	type kindStat struct {
		n, blamed, never, late int
		rec                    []time.Duration
		bounds                 map[time.Duration]bool
	}
	kinds := map[string]*kindStat{}
	get := func(k string) *kindStat {
		s := kinds[k]
		if s == nil {
			s = &kindStat{bounds: map[time.Duration]bool{}}
			kinds[k] = s
		}
		return s
	}
	for _, f := range in.Faults {
		s := get(f.Kind)
		s.n++
		s.bounds[f.Bound] = true
		d, ok := recovered(f)
		switch {
		case !ok:
			s.never++
		case d > f.Bound:
			s.late++
		}
		if ok {
			s.rec = append(s.rec, d)
		}
	}
	for _, r := range in.Results {
		if r.Blame != "" && r.Outcome != record.Served {
			get(r.Blame).blamed++
		}
	}
	p("Recovery is timed from the fault's lifting (the process back, the disk freed) to the component serving again.\n\n")
	p("| Fault kind | Injected | Failures blamed | Recovery min | median | max | Bound | Late | Never recovered |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, k := range sortedKeys(kinds) {
		s := kinds[k]
		mn, md, mx := "—", "—", "—"
		if len(s.rec) > 0 {
			sort.Slice(s.rec, func(i, j int) bool { return s.rec[i] < s.rec[j] })
			mn, mx = fmtDur(s.rec[0]), fmtDur(s.rec[len(s.rec)-1])
			md = fmtDur(median(s.rec))
		}
		var bs []string
		for _, d := range sortedDurations(s.bounds) {
			bs = append(bs, fmtDur(d))
		}
		bound := strings.Join(bs, ", ")
		if bound == "" {
			bound = "—"
		}
		p("| %s | %d | %d | %s | %s | %s | %s | %d | %d |\n", cell(k), s.n, s.blamed, mn, md, mx, bound, s.late, s.never)
	}

	fs := append([]record.Fault(nil), in.Faults...)
	sort.SliceStable(fs, func(i, j int) bool {
		if !fs[i].Start.Equal(fs[j].Start) {
			return fs[i].Start.Before(fs[j].Start)
		}
		if fs[i].Kind != fs[j].Kind {
			return fs[i].Kind < fs[j].Kind
		}
		return fs[i].Target < fs[j].Target
	})
	p("\n<details><summary>Every fault (%d)</summary>\n\n", len(fs))
	p("| At | Kind | Target | Lifted after | Recovered after lifting | Bound | Note |\n|---:|---|---|---:|---:|---:|---|\n")
	for _, f := range fs {
		lifted := "never"
		if !f.End.IsZero() {
			lifted = fmtDur(f.End.Sub(f.Start))
		}
		rec := "never"
		if d, ok := recovered(f); ok {
			rec = fmtDur(d)
			if d > f.Bound {
				rec += " (late)"
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", offset(in, f.Start), cell(f.Kind), cell(f.Target), lifted, rec, fmtDur(f.Bound), cell(f.Note))
	}
	p("\n</details>\n")
}

func writeFailures(b *bytes.Buffer, in Input) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	list := func(title string, o record.Outcome) {
		var rs []record.Result
		for _, r := range in.Results {
			if r.Outcome == o {
				rs = append(rs, r)
			}
		}
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
		p("\n### %s (%d)\n\n", title, len(rs))
		if len(rs) == 0 {
			p("None.\n")
			return
		}
		p("| At | Kind | Status | Path | Detail |\n|---:|---|---:|---|---|\n")
		for i, r := range rs {
			if i == maxListed {
				break
			}
			status := "—"
			if r.Status != 0 {
				status = fmt.Sprint(r.Status)
			}
			p("| %s | %s | %s | %s | %s |\n", offset(in, r.Start), cell(r.Kind), status, cell(strings.Join(r.Path, ", ")), detailCell(r.Detail))
		}
		if len(rs) > maxListed {
			p("\n… and %d more.\n", len(rs)-maxListed)
		}
	}
	p("\n## Defects and unattributed failures\n")
	p("\nThe first %d of each, by start time; At is the offset from the run's start.\n", maxListed)
	list("Defects", record.Defect)
	list("Unattributed failures", record.Unattributed)
}

func writeHealth(b *bytes.Buffer, ps []procStat) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("\n## Process health\n\n")
	if len(ps) == 0 {
		p("No samples recorded.\n")
		return
	}
	num := func(v int) string {
		if v < 0 {
			return "—"
		}
		return fmt.Sprint(v)
	}
	pct := func(v float64) string {
		if math.IsNaN(v) {
			return "—"
		}
		return fmt.Sprintf("%+.1f%%", v*100)
	}
	mibCell := func(v, growth float64) string {
		if math.IsNaN(growth) {
			return "—"
		}
		return fmt.Sprintf("%.1f", mib(v))
	}

	p("### Memory\n\n")
	p("Each process is judged on the PID whose samples past the warm-up of the run and of that PID (a process started mid-run warms up as the first one did) span longest, on every such sample, faults included: resident memory is a level, faults come all through the run and tilt no trend, and it takes many samples to see through the collector's sawtooth. ")
	p("Start and end are a Theil–Sen line (the median of the slopes between every two samples) at the span's ends, not samples, and growth is end/start − 1; anonymous growth is the same for RssAnon (heap and stacks, where memory a process keeps shows; pages of its binary run for the first time grow RSS only). ")
	p("A span under %s is not judged. Restarts count distinct PIDs.\n\n", fmtDur(minLifetime))
	p("| Process | Samples | Restarts | PID | Span | RSS at start (MiB, trend) | RSS at end (MiB, trend) | Growth | Anonymous growth |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range ps {
		m := s.Mem
		if !m.Measured {
			p("| %s | %d | %d | — | — | — | — | %s | — |\n", cell(s.Name), s.Samples, s.Restarts, cell("not measured: "+m.Skip))
			continue
		}
		p("| %s | %d | %d | %d | %s | %s | %s | %s | %s |\n", cell(s.Name), s.Samples, s.Restarts, m.PID, fmtDur(m.Span),
			mibCell(m.First, m.Growth), mibCell(m.Last, m.Growth), pct(m.Growth), pct(m.AnonGrowth))
	}

	p("\n### Goroutines and descriptors\n\n")
	p("First and last are the first and last quiet samples of the PID with the longest span of them: past the warm-up of the run and of that PID, and not within a fault or %s after it, since peers of a faulty component retry, buffer and reconnect. That may be another PID than memory's. Max counts every sample of every PID.\n\n", fmtDur(quietAfterFault))
	p("| Process | PID | Span | FDs first | FDs last | FDs max | Conns max | Goroutines first | Goroutines last |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range ps {
		q := s.Base
		if !q.Measured {
			p("| %s | — | — | %s | — | %s | %s | — | — |\n", cell(s.Name), cell("not measured: "+q.Skip), num(s.FDMax), num(s.ConnsMax))
			continue
		}
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", cell(s.Name), q.PID, fmtDur(q.Span),
			num(q.First.FDs), num(q.Last.FDs), num(s.FDMax), num(s.ConnsMax), num(q.First.Goroutines), num(q.Last.Goroutines))
	}
}

// offset prints a time as seconds into the run, the unit of the charts'
// x axis, so a row can be found on them.
func offset(in Input, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return fmt.Sprintf("%.1f s", t.Sub(in.Start).Seconds())
}

func median(ds []time.Duration) time.Duration {
	n := len(ds)
	if n%2 == 1 {
		return ds[n/2]
	}
	return (ds[n/2-1] + ds[n/2]) / 2
}

func sortedDurations(m map[time.Duration]bool) []time.Duration {
	ds := make([]time.Duration, 0, len(m))
	for d := range m {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds
}

// oneLine folds line breaks so a value cannot end a table row or a list
// item early.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r\n", " ")
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

// cell makes text safe inside a table cell: a pipe would split the cell,
// a newline would end the row, and a '<' that starts a tag could open
// HTML that swallows the rest of the page. A '<' before a space or digit
// opens nothing and stays, so "< 5%" reads as written.
func cell(s string) string {
	s = strings.NewReplacer(`\`, `\\`, "|", `\|`).Replace(oneLine(s))
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '<' && i+1 < len(s) && opensTag(s[i+1]) {
			b.WriteString("&lt;")
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// opensTag reports whether c after '<' can begin HTML: a tag, a closing
// tag, a comment or declaration, a processing instruction.
func opensTag(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '/' || c == '!' || c == '?'
}

// detailCell cuts before escaping so an escape sequence is never split.
func detailCell(s string) string {
	s = strings.TrimSpace(oneLine(s))
	if r := []rune(s); len(r) > maxDetail {
		s = string(r[:maxDetail]) + "…"
	}
	return cell(s)
}
