package report

import (
	"bytes"
	"fmt"
	"image/png"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

const mb = 1 << 20

// synth is a five-minute run: three faults, ~400 requests, three
// processes sampled every 5 s, router-1 restarted at 121 s with a larger
// RSS than before (so pairing across PIDs would call it growth), and
// engine-a1 10% higher during warm-up and inside fault windows only
// (which the quiet points leave out, and the RSS trend sees through).
// It meets every target.
func synth() Input {
	in := Input{
		Seed: 7, Commit: "abc1234", Duration: 5 * time.Minute,
		Start: t0, End: at(300), Warmup: 30 * time.Second,
		Topology: "Two routers and two engines behind the gateway.",
		Command:  "make soak SOAK_SEED=7",
		Faults: []record.Fault{
			{Kind: "sigkill-engine", Target: "engine-a1", Start: at(60), End: at(62), Recovered: at(66), Bound: 10 * time.Second},
			{Kind: "restart-router", Target: "router-1", Start: at(120), End: at(122), Recovered: at(125), Bound: 5 * time.Second},
			{Kind: "link-down", Target: "gateway", Start: at(230), End: at(240), Recovered: at(242), Bound: 10 * time.Second, Note: "link restored"},
		},
	}
	kinds := []string{"chat", "chat-stream", "ocr", "bad-json"}
	paths := map[string][]string{
		"chat":        {"gateway", "router-1", "engine-a1"},
		"chat-stream": {"gateway", "router-1", "engine-a1"},
		"ocr":         {"gateway", "model-ppocr"},
		"bad-json":    {"gateway"},
	}
	for i := 0; i < 400; i++ {
		s := float64(i) * 0.75
		k := kinds[i%len(kinds)]
		r := record.Result{Kind: k, Start: at(s), End: at(s + 0.05 + float64(i%10)*0.02), Status: 200, Path: paths[k], Outcome: record.Served}
		for _, f := range in.Faults {
			if s >= f.Start.Sub(t0).Seconds() && s <= f.End.Sub(t0).Seconds()+3 {
				for _, p := range r.Path {
					if p == f.Target {
						r.Outcome, r.Status, r.Blame, r.Detail, r.Failed = record.CleanFail, 503, f.Kind, "upstream unavailable", true
					}
				}
			}
		}
		in.Results = append(in.Results, r)
	}
	inFault := func(s float64) bool {
		for _, f := range in.Faults {
			if s >= f.Start.Sub(t0).Seconds() && s <= f.End.Sub(t0).Seconds()+20 {
				return true
			}
		}
		return false
	}
	for s := 0.0; s <= 300; s += 5 {
		bump := 0
		if inFault(s) {
			bump = 30 // descriptors held while peers reconnect: not a leak
		}
		in.Samples = append(in.Samples, record.Sample{At: at(s), Proc: "gateway", PID: 100, RSS: 200 * mb, FDs: 40 + bump, Conns: 12, Threads: 9, Goroutines: 100 + bump})
		eng := int64(1000 * mb)
		if s < 30 {
			eng = int64(float64(900*mb) * (1 + s/300))
		}
		if inFault(s) {
			eng = 1100 * mb
		}
		in.Samples = append(in.Samples, record.Sample{At: at(s), Proc: "engine-a1", PID: 300, RSS: eng, FDs: 20, Conns: 3, Threads: 30, Goroutines: -1})
		switch {
		case s <= 120:
			in.Samples = append(in.Samples, record.Sample{At: at(s), Proc: "router-1", PID: 200, RSS: 100 * mb, FDs: 30, Conns: 5, Threads: 8, Goroutines: 60})
		case s >= 125:
			in.Samples = append(in.Samples, record.Sample{At: at(s), Proc: "router-1", PID: 201, RSS: 120 * mb, RSSAnon: 60 * mb, FDs: 31 + bump, Conns: 5, Threads: 8, Goroutines: 62})
		}
	}
	return in
}

// ramp makes one process's RSS grow by g, linearly, from the end of the
// warm-up (30 s) to the end of the run.
func ramp(in *Input, proc string, g float64) {
	for i := range in.Samples {
		if s := &in.Samples[i]; s.Proc == proc && !s.At.Before(at(30)) {
			s.RSS = int64(float64(s.RSS) * (1 + g*(s.At.Sub(t0).Seconds()-30)/270))
		}
	}
}

// setLast changes the last quiet sample (300 s) of one process.
func setLast(in *Input, proc string, f func(*record.Sample)) {
	for i := range in.Samples {
		if in.Samples[i].Proc == proc && in.Samples[i].At.Equal(at(300)) {
			f(&in.Samples[i])
		}
	}
}

func TestEvaluate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Input)
		failed string // letters of the targets expected to fail, a–f
	}{
		{"base", func(*Input) {}, ""},
		{"defect", func(in *Input) {
			in.Results[10].Outcome, in.Results[10].Detail = record.Defect, "truncated stream"
		}, "a"},
		{"unattributed", func(in *Input) {
			in.Results[11].Outcome, in.Results[11].Status = record.Unattributed, 500
		}, "b"},
		{"never recovered", func(in *Input) { in.Faults[1].Recovered = time.Time{} }, "c"},
		{"late recovery", func(in *Input) { in.Faults[1].Recovered = at(127.5) }, "c"},
		{"recovery exactly at bound", func(in *Input) { in.Faults[1].Recovered = at(127) }, ""},
		{"rss grows 10% at quiet points", func(in *Input) {
			for i := range in.Samples {
				if s := &in.Samples[i]; s.Proc == "engine-a1" && s.At.After(at(30)) {
					s.RSS = int64(float64(1000*mb) * (1 + 0.1*s.At.Sub(t0).Seconds()/300))
				}
			}
		}, "d"},
		{"rss grows 4%", func(in *Input) { ramp(in, "gateway", 0.04) }, ""},
		{"rss grows 6%", func(in *Input) { ramp(in, "gateway", 0.06) }, "d"},
		{"one high last sample is not growth", func(in *Input) { setLast(in, "gateway", func(s *record.Sample) { s.RSS = 240 * mb }) }, ""},
		{"a step in the last 20 s is not a trend", func(in *Input) {
			for i := range in.Samples {
				if s := &in.Samples[i]; s.Proc == "gateway" && !s.At.Before(at(280)) {
					s.RSS = 240 * mb
				}
			}
		}, ""},
		{"descriptors +8", func(in *Input) { setLast(in, "gateway", func(s *record.Sample) { s.FDs = 48 }) }, ""},
		{"descriptors +9", func(in *Input) { setLast(in, "gateway", func(s *record.Sample) { s.FDs = 49 }) }, "e"},
		{"goroutines at limit", func(in *Input) { setLast(in, "gateway", func(s *record.Sample) { s.Goroutines = 120 }) }, ""},
		{"goroutines over limit", func(in *Input) { setLast(in, "router-1", func(s *record.Sample) { s.Goroutines = 79 }) }, "e"},
		{"a restarted process warms up again", func(in *Input) {
			for i := range in.Samples {
				if s := &in.Samples[i]; s.PID == 201 && s.At.Before(at(165)) {
					s.RSS = 60 * mb
				}
			}
		}, ""},
		{"orphan", func(in *Input) { in.Orphans = []string{"mentat-engine pid 4242"} }, "f"},
		{"no faults", func(in *Input) { in.Faults = nil }, "c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := synth()
			c.mutate(&in)
			ts := Evaluate(in)
			if len(ts) != 6 {
				t.Fatalf("got %d targets, want 6", len(ts))
			}
			for i, tg := range ts {
				letter := string(rune('a' + i))
				want := !strings.Contains(c.failed, letter)
				if tg.Met != want {
					t.Errorf("target (%s) %q: met=%v, want %v; measured: %s", letter, tg.Goal, tg.Met, want, tg.Measured)
				}
			}
		})
	}
}

func TestEvaluateMeasured(t *testing.T) {
	in := synth()
	in.Faults[1].Recovered = time.Time{}
	in.Faults[0].Recovered = at(80)
	in.Orphans = []string{"b-proc", "a-proc"}
	// A process seen only briefly cannot speak to growth.
	for s := 100.0; s <= 140; s += 5 {
		in.Samples = append(in.Samples, record.Sample{At: at(s), Proc: "agent", PID: 9, RSS: mb, FDs: 5, Goroutines: -1})
	}
	ts := Evaluate(in)
	for _, want := range []struct {
		i    int
		text string
	}{
		{2, "missed: restart-router (1 of 1: 1 never); sigkill-engine (1 of 1: 1 late)"},
		{3, "worst: engine-a1 +0.0%"},
		{3, "3 of 4 processes measured"},
		{3, "skipped: agent (longest lifetime (pid 9) 10s < 2m0s)"},
		{4, "skipped: agent (no quiet sample after warm-up)"},
		{4, "descriptors worst: engine-a1 20 → 20"},
		{4, "goroutines worst: router-1 62 → 62 (limit 78)"},
		{5, "2: a-proc, b-proc"},
	} {
		if !strings.Contains(ts[want.i].Measured, want.text) {
			t.Errorf("target %d measured %q lacks %q", want.i, ts[want.i].Measured, want.text)
		}
	}
	// The restarted router is judged on its second, longer PID.
	for _, p := range procStats(in) {
		if p.Name == "router-1" && (p.Mem.PID != 201 || p.Base.PID != 201 || p.Restarts != 1 || p.Mem.Growth != 0) {
			t.Errorf("router-1: pids %d, %d restarts %d growth %v; want pid 201, 1 restart, 0 growth", p.Mem.PID, p.Base.PID, p.Restarts, p.Mem.Growth)
		}
	}
}

func countResults(in Input, kind string, o record.Outcome) int {
	n := 0
	for _, r := range in.Results {
		if r.Kind == kind && r.Outcome == o {
			n++
		}
	}
	return n
}

func TestWrite(t *testing.T) {
	in := synth()
	in.Results[10].Outcome, in.Results[10].Detail = record.Defect, "truncated stream"
	in.Notes = []string{"disk-full skipped: not root"}
	md := filepath.Join(t.TempDir(), "docs", "soak.md")
	if err := Write(in, md); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	blamed := 0
	for _, r := range in.Results {
		if r.Blame == "restart-router" {
			blamed++
		}
	}
	if blamed == 0 {
		t.Fatal("synthetic input has no failure blamed on restart-router")
	}
	chat := func(o record.Outcome) int { return countResults(in, "chat", o) }
	wants := []string{
		"# Soak report\n",
		"Commit `abc1234`, seed 7, duration 5m0s, started 2026-01-02T03:04:05Z, warm-up 30s.",
		"| Goal | Measured | Met |",
		"| 0 defects | 1 defects in 400 requests | ❌ |",
		"| 0 orphan processes | 0 | ✅ |",
		"| RSS growth < 5% after warm-up, per process | worst: ",
		"Two routers and two engines behind the gateway.",
		"```sh\nmake soak SOAK_SEED=7\n```",
		"| Kind | served | failed cleanly (fault) | failed, no fault to blame | defect | Total |",
		fmt.Sprintf("| chat | %d | %d | 0 | %d | 100 |", chat(record.Served), chat(record.CleanFail), chat(record.Defect)),
		fmt.Sprintf("| **total** | %d | %d | 0 | 1 | 400 |", countOutcome(in.Results, record.Served), countOutcome(in.Results, record.CleanFail)),
		fmt.Sprintf("| restart-router | 1 | %d | 3s | 3s | 3s | 5s | 0 | 0 |", blamed),
		"| 230.0 s | link-down | gateway | 10s | 2s | 10s | link restored |",
		"### Defects (1)",
		"| 7.5 s | ocr | 200 | gateway, model-ppocr | truncated stream |",
		"### Unattributed failures (0)\n\nNone.",
		"| RSS at start (MiB, trend) | RSS at end (MiB, trend) |",
		"| router-1 | 61 | 1 | 201 | 2m25s | 120.0 | 120.0 | +0.0% | +0.0% |",
		"| engine-a1 | 61 | 0 | 300 | 4m30s | 1000.0 | 1000.0 | +0.0% | — |",
		"| router-1 | 201 | 2m25s | 31 | 31 | 61 | 5 | 62 | 62 |",
		"| engine-a1 | 300 | 4m30s | 20 | 20 | 20 | 3 | — | — |",
		"## Orphans\n\nNone.",
		"## Notes\n\n- disk-full skipped: not root",
	}
	for _, f := range []string{"success.png", "latency-p99.png", "rss.png", "fds.png"} {
		wants = append(wants, "](soak-charts/"+f+")")
	}
	for _, w := range wants {
		if !strings.Contains(doc, w) {
			t.Errorf("report lacks %q", w)
		}
	}
	if strings.Contains(doc, "chart skipped") {
		t.Error("a chart was skipped with data present")
	}

	for _, f := range []string{"success.png", "latency-p99.png", "rss.png", "fds.png"} {
		p := filepath.Join(filepath.Dir(md), "soak-charts", f)
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got := img.Bounds().Size(); got.X != 864 || got.Y != 336 {
			t.Errorf("%s: %v, want 864x336", f, got)
		}
		colours := map[[3]uint32]bool{}
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 3 {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 3 {
				r, g, b, _ := img.At(x, y).RGBA()
				colours[[3]uint32{r, g, b}] = true
			}
		}
		if len(colours) < 10 {
			t.Errorf("%s: only %d colours, looks blank", f, len(colours))
		}
	}
}

func TestWriteDeterministic(t *testing.T) {
	dir := t.TempDir()
	in := synth()
	in.Results[5].Outcome = record.Unattributed
	a := filepath.Join(dir, "a.md")
	if err := Write(in, a); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	rng.Shuffle(len(in.Results), func(i, j int) { in.Results[i], in.Results[j] = in.Results[j], in.Results[i] })
	rng.Shuffle(len(in.Samples), func(i, j int) { in.Samples[i], in.Samples[j] = in.Samples[j], in.Samples[i] })
	rng.Shuffle(len(in.Faults), func(i, j int) { in.Faults[i], in.Faults[j] = in.Faults[j], in.Faults[i] })
	b := filepath.Join(dir, "b.md")
	if err := Write(in, b); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(a)
	y, _ := os.ReadFile(b)
	if !bytes.Equal(bytes.ReplaceAll(x, []byte("a-charts"), []byte("b-charts")), y) {
		t.Error("same run in another order gives another report")
	}
}

func TestDetailEscaping(t *testing.T) {
	in := synth()
	long := "bad | body\nsecond line <b>x</b>\r\n" + strings.Repeat("y", 300)
	in.Results[3].Outcome, in.Results[3].Detail, in.Results[3].Status = record.Defect, long, 0
	for i := 100; i < 140; i++ {
		in.Results[i].Outcome, in.Results[i].Detail = record.Unattributed, fmt.Sprintf("error %d", i)
	}
	md := filepath.Join(t.TempDir(), "soak.md")
	if err := Write(in, md); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(md)
	doc := string(b)
	var row string
	for _, l := range strings.Split(doc, "\n") {
		if strings.Contains(l, "bad ") {
			row = l
		}
	}
	if !strings.HasPrefix(row, "| 2.2 s | bad-json | — | gateway | bad \\| body second line &lt;b>x&lt;/b> yyy") {
		t.Fatalf("defect row %q", row)
	}
	if !strings.HasSuffix(row, "y… |") {
		t.Errorf("detail not cut: %q", row)
	}
	if n := strings.Count(strings.ReplaceAll(row, `\|`, ""), "|"); n != 6 {
		t.Errorf("row has %d cell separators, want 6: %q", n, row)
	}
	detail := strings.TrimSuffix(row[strings.Index(row, "bad "):], " |")
	unescaped := strings.NewReplacer(`\|`, "|", "&lt;", "<").Replace(detail)
	if n := len([]rune(unescaped)); n != maxDetail+1 {
		t.Errorf("detail is %d runes, want %d and an ellipsis", n, maxDetail)
	}

	if !strings.Contains(doc, "### Unattributed failures (40)") || !strings.Contains(doc, "… and 10 more.") {
		t.Error("unattributed section not capped at 30 with a count of the rest")
	}
	if strings.Contains(doc, "error 130") || !strings.Contains(doc, "error 129") {
		t.Error("unattributed table does not list exactly the first 30 by time")
	}
}

func TestEmpty(t *testing.T) {
	ts := Evaluate(Input{})
	if len(ts) != 6 {
		t.Fatalf("%d targets", len(ts))
	}
	for i, tg := range ts {
		if tg.Met != (i == 5) {
			t.Errorf("empty run: target %q met=%v (%s)", tg.Goal, tg.Met, tg.Measured)
		}
	}
	md := filepath.Join(t.TempDir(), "soak.md")
	// A full report first, so the empty one must also clear its charts.
	if err := Write(synth(), md); err != nil {
		t.Fatal(err)
	}
	if err := Write(Input{}, md); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if n := strings.Count(doc, "chart skipped"); n != 4 {
		t.Errorf("%d charts skipped, want 4:\n%s", n, doc)
	}
	for _, w := range []string{"No requests recorded.", "No faults injected.", "No samples recorded.", "started unknown", "| 0 defects | no requests recorded | ❌ |"} {
		if !strings.Contains(doc, w) {
			t.Errorf("empty report lacks %q", w)
		}
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(md), "soak-charts", "*.png"))
	if len(left) != 0 {
		t.Errorf("stale charts left: %v", left)
	}
}

func TestSeries(t *testing.T) {
	in := Input{Start: t0, Results: []record.Result{
		{Start: at(1), End: at(2), Outcome: record.Served},
		{Start: at(1), End: at(4), Outcome: record.Served},
		{Start: at(3), End: at(5), Outcome: record.Served},
		{Start: at(3), End: at(6), Outcome: record.CleanFail},
		{Start: at(12), End: at(13), Outcome: record.Defect},
		// A job polled late on purpose is no latency to chart.
		{Kind: LatePrefix + "job-ppocr", Start: at(0), End: at(9), Outcome: record.Served},
	}}
	s := successSeries(in)[0].xys
	if len(s) != 2 || s[0].X != 5 || s[0].Y != 80 || s[1].X != 15 || s[1].Y != 0 {
		t.Errorf("success %v", s)
	}
	l := latencySeries(in)[0].xys
	if len(l) != 1 || l[0].Y != 3 {
		t.Errorf("p99 %v", l)
	}
	if p := p99([]float64{5, 1, 2, 3}); p != 5 {
		t.Errorf("p99 of 4 = %v", p)
	}
	ls := make([]float64, 200)
	for i := range ls {
		ls[i] = float64(i + 1)
	}
	if p := p99(ls); p != 198 {
		t.Errorf("p99 of 1..200 = %v, want 198", p)
	}
}

// Growth in RSS with the anonymous part flat is named as such: pages of
// the binary, not memory kept.
func TestRSSGrowthNamesAnonymousGrowth(t *testing.T) {
	in := synth()
	// 120 → 130 MiB over PID 201's span past its warm-up, 155 s to 300 s.
	for i := range in.Samples {
		if s := &in.Samples[i]; s.PID == 201 && !s.At.Before(at(155)) {
			s.RSS = 120*mb + int64(float64(10*mb)*s.At.Sub(at(155)).Seconds()/145)
		}
	}
	d := Evaluate(in)[3]
	if d.Met || !strings.Contains(d.Measured, "router-1 +8.3% (anonymous +0.0%)") {
		t.Errorf("%v: %s", d.Met, d.Measured)
	}
}

// life is one PID of the process gcRun samples: from and to in seconds
// of the run, level its RSS in MiB s seconds after its birth.
type life struct {
	pid      int
	from, to float64
	level    func(s float64) float64
}

func flat(v float64) func(float64) float64 { return func(float64) float64 { return v } }

// linear grows from v by g over d seconds, from its PID's warm-up on.
func linear(v, g, d float64) func(float64) float64 {
	return func(s float64) float64 { return v * (1 + g*max(s-120, 0)/d) }
}

// gcRun is a 30-minute run with a 2-minute warm-up and a fault every
// 10–30 s (on another component, so every sample of "proc" near one is
// not quiet), sampling "proc" every 2 s. Its RSS is lives' level under a
// collector's sawtooth, ±15% around it in cycles of 20–60 s, with one
// sample in about 40 far off (+60% or −40%): a process reading its RSS
// while paging, or the kernel mid-reclaim.
func gcRun(lives ...life) Input {
	in := Input{Start: t0, Duration: 30 * time.Minute, End: at(1800), Warmup: 2 * time.Minute}
	rng := rand.New(rand.NewSource(3))
	for s := 60.0; s < 1740; s += 10 + 20*rng.Float64() {
		d := 2 + 6*rng.Float64()
		in.Faults = append(in.Faults, record.Fault{Kind: "sigstop-engine", Target: "other", Start: at(s), End: at(s + d), Recovered: at(s + d + 1), Bound: 3 * time.Second})
	}
	for _, l := range lives {
		cycle, into := 20+40*rng.Float64(), 0.0
		for s := l.from; s < l.to; s += 2 {
			if into += 2; into >= cycle {
				cycle, into = 20+40*rng.Float64(), 0
			}
			v := l.level(s-l.from) * (0.85 + 0.3*into/cycle)
			switch r := rng.Float64(); {
			case r < 0.0125:
				v *= 1.6
			case r < 0.025:
				v *= 0.6
			}
			in.Samples = append(in.Samples, record.Sample{At: at(s), Proc: "proc", PID: l.pid, RSS: int64(v * mb), RSSAnon: int64((v - 8) * mb), FDs: 10, Goroutines: 20})
		}
	}
	return in
}

// The RSS target is judged on a trend through every sample of one PID
// past warm-up, which the collector's sawtooth and odd readings do not
// move and a leak does.
func TestRSSTrend(t *testing.T) {
	cases := []struct {
		name     string
		lives    []life
		pid      int
		restarts int
		span     time.Duration // 0: not checked
		lo, hi   float64       // bounds of the growth
		startMiB float64       // the trend at the span's start, ±3%
		met      bool
	}{
		{"flat under a sawtooth", []life{{1, 0, 1800, flat(20)}}, 1, 0, 1678 * time.Second, -0.01, 0.01, 20, true},
		{"+8% under a sawtooth", []life{{1, 0, 1800, linear(20, 0.08, 1678)}}, 1, 0, 0, 0.065, 0.095, 20, false},
		// Across PIDs it would be +50%; each is flat.
		{"a restart is not growth", []life{{1, 0, 720, flat(20)}, {2, 720, 1800, flat(30)}}, 2, 1, 958 * time.Second, -0.01, 0.01, 30, true},
		// Across PIDs it would be −30%; the second leaks.
		{"a restart does not hide a leak", []life{{1, 0, 720, flat(30)}, {2, 720, 1800, linear(20, 0.08, 958)}}, 2, 1, 0, 0.065, 0.095, 20, false},
		// Climbing from 5 to 20 MiB in the run's warm-up.
		{"the run's warm-up is left out", []life{{1, 0, 1800, func(s float64) float64 { return 5 + 15*min(s, 120)/120 }}}, 1, 0, 1678 * time.Second, -0.01, 0.01, 20, true},
		// The second PID lives 6 minutes, climbing for its first two; the
		// first is too short to judge. With its warm-up the climb would be
		// a third of the samples and tilt the trend.
		{"a PID's own warm-up is left out", []life{{1, 0, 200, flat(20)}, {2, 1440, 1800, func(s float64) float64 { return 5 + 15*min(s, 120)/120 }}}, 2, 1, 238 * time.Second, -0.01, 0.01, 20, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := gcRun(c.lives...)
			ps := procStats(in)
			if len(ps) != 1 {
				t.Fatalf("%d processes", len(ps))
			}
			m := ps[0].Mem
			t.Logf("pid %d over %s: %+.2f%% (trend %.2f → %.2f MiB), anonymous %+.2f%%", m.PID, m.Span, m.Growth*100, mib(m.First), mib(m.Last), m.AnonGrowth*100)
			if !m.Measured || m.PID != c.pid || ps[0].Restarts != c.restarts {
				t.Fatalf("measured %v (%s), pid %d, restarts %d; want pid %d, %d restarts", m.Measured, m.Skip, m.PID, ps[0].Restarts, c.pid, c.restarts)
			}
			if c.span != 0 && m.Span != c.span {
				t.Errorf("span %s, want %s", m.Span, c.span)
			}
			if m.Growth < c.lo || m.Growth > c.hi {
				t.Errorf("growth %+.2f%%, want %+.1f%% to %+.1f%%", m.Growth*100, c.lo*100, c.hi*100)
			}
			if r := mib(m.First) / c.startMiB; r < 0.97 || r > 1.03 {
				t.Errorf("trend at start %.2f MiB, want %.0f", mib(m.First), c.startMiB)
			}
			if d := Evaluate(in)[3]; d.Met != c.met {
				t.Errorf("RSS target met=%v, want %v: %s", d.Met, c.met, d.Measured)
			}
		})
	}
}

func TestTheilSen(t *testing.T) {
	cases := []struct {
		name string
		x, y []float64
		a, b float64
		ok   bool
	}{
		{"a line", []float64{0, 1, 2, 3}, []float64{1, 3, 5, 7}, 1, 2, true},
		{"an outlier short of half", []float64{0, 1, 2, 3, 4}, []float64{0, 1, 100, 3, 4}, 0, 1, true},
		// Two slopes (a repeated x gives none): their mean.
		{"an even count takes the middle two", []float64{0, 0, 2}, []float64{0, 2, 4}, 1, 1.5, true},
		{"one x", []float64{5, 5}, []float64{1, 2}, 0, 0, false},
		{"none", nil, nil, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b, ok := theilSen(c.x, c.y)
			if ok != c.ok || a != c.a || b != c.b {
				t.Errorf("got a=%v b=%v ok=%v, want a=%v b=%v ok=%v", a, b, ok, c.a, c.b, c.ok)
			}
		})
	}
}
