package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

// target is one goal from the issues and how this run did against it.
type target struct {
	goal, measured string
	met            bool
	// known is false when the figure could not be measured.
	known bool
	// info marks a figure the issues ask for without setting a number.
	info bool
	// detail follows the verdict word: where met applies when a target
	// was measured in more than one placement.
	detail string
}

// section is one part of the report.
type section struct {
	key, title string
	run        func(ctx context.Context, cfg config) (markdown string, targets []target, err error)
}

func sections() []section {
	return []section{
		{"router", "Router vs Nginx vs direct", runRouter},
		{"streams", "Memory per open stream", runIdle},
		{"scale", "Router cost vs cluster size", runScale},
		{"enginesim", "enginesim at load", runEnginesim},
		{"routing", "Replica routing policies", runRouting},
		{"flow", "Flow control under saturation", runFlow},
		{"ppocr", "Model server vs in-process ONNX Runtime", runPPOCR},
		{"gateway", "Gateway vs Nginx vs direct to the model port", runGateway},
		{"mortredserver", "Model-server overhead and batching", runMortredServer},
		{"mortredhosts", "Mortred: the TLS edge, rollouts and several hosts", runMortredHosts},
	}
}

func sectionKeys() []string {
	var ks []string
	for _, s := range sections() {
		ks = append(ks, s.key)
	}
	return ks
}

// runSections runs the selected sections in order and assembles the
// report. A failed section is reported in place and counted.
func runSections(ctx context.Context, cfg config) (string, int) {
	want := map[string]bool{}
	for _, k := range strings.Split(cfg.only, ",") {
		want[strings.TrimSpace(k)] = true
	}
	start := time.Now()
	// The commit is read now, when the binaries under test were built,
	// not when the run ends: a checkout that moves on meanwhile must not
	// name the report.
	commit := gitDescribe(cfg.root)
	loadStart := harness.LoadAvg()
	nofile, nofileErr := harness.RaiseNoFile(65536)
	cfg.nofile = nofile

	var body strings.Builder
	var targets []target
	failed := 0
	n := 0
	for _, s := range sections() {
		if !want[s.key] {
			continue
		}
		n++
		fmt.Fprintf(os.Stderr, "== %s\n", s.title)
		t0 := time.Now()
		md, ts, err := s.run(ctx, cfg)
		fmt.Fprintf(&body, "## %d. %s\n\n", n, s.title)
		if err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "%s: %v\n", s.key, err)
			fmt.Fprintf(&body, "**Not measured in this run:** %s\n\n", mdEscape(err.Error()))
		}
		body.WriteString(md)
		fmt.Fprintf(&body, "\n_Section time: %s._\n\n", time.Since(t0).Round(time.Second))
		targets = append(targets, ts...)
	}

	m := harness.ReadMachine()
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `make bench` (`scripts/bench.sh` → `bench/report`); do not edit by hand. " +
		"Every comparison below was measured side by side in the one run described here, and is given as a ratio. " +
		"Targets that were missed are reported as missed, with what limits them.\n\n")
	loadNote := ""
	if l1 := firstField(loadStart); l1 > 0.5*float64(m.NProc) {
		loadNote = fmt.Sprintf(" — **busy machine**: a 1-minute load of %.2f on %d CPUs means other work shared the CPUs, so absolute numbers are noisy; the ratios, measured back to back, less so", l1, m.NProc)
	}
	rows := [][]string{
		{"date (UTC)", start.UTC().Format("2006-01-02 15:04")},
		{"commit", commit},
		{"CPU", fmt.Sprintf("%s × %d (nproc)", m.CPUModel, m.NProc)},
		{"memory", m.MemTotal},
		{"kernel", m.Kernel},
		{"Go", m.Go},
		{"nginx", m.Nginx},
		{"wrk", m.Wrk},
		{"load average at start (1, 5, 15 min)", loadStart + loadNote},
		{"load average at end", harness.LoadAvg()},
		{"CPU pinning", pinText(cfg)},
		{"RLIMIT_NOFILE", nofileText(nofile, nofileErr)},
		{"total time", time.Since(start).Round(time.Second).String()},
	}
	b.WriteString("## Machine and run\n\n" + harness.Table([]string{"", ""}, rows, false) + "\n")
	b.WriteString("Run:\n\n```\nmake bench            # setup, build, then scripts/bench.sh\n" + strings.Join(cfg.args, " ") + "\n```\n\n")

	trows := [][]string{}
	for _, t := range targets {
		v := "**missed**"
		switch {
		case !t.known:
			v = "not measured"
		case t.info:
			v = "reported (no number set)"
		case t.met:
			v = "met"
		}
		trows = append(trows, []string{t.goal, t.measured, v + t.detail})
	}
	if len(trows) > 0 {
		b.WriteString("## Targets\n\n" + harness.Table([]string{"target (issue)", "this run", "verdict"}, trows, false) + "\n")
	}
	b.WriteString(body.String())
	return b.String(), failed
}

func pinText(cfg config) string {
	if !cfg.pin {
		return "none"
	}
	return "servers under test (engines, router, Nginx, model server, gateway, daemon, agents) on CPU 0 with `taskset -c 0`; " +
		"load generators (wrk, the streaming client) on CPU 1 with `taskset -c 1`, so the load never takes CPU from what it measures " +
		"and every proxy shares its core with the engine behind it, as the direct path's engine does not: that is the proxy's cost. " +
		"The gateway section adds a second placement (gateway and Nginx on the load generator's core, the model server alone on its own), " +
		"described there. The Go benchmarks and the PP-OCR benchmark are not pinned."
}

func nofileText(n uint64, err error) string {
	if err != nil {
		return fmt.Sprintf("%d (could not raise: %v)", n, err)
	}
	return fmt.Sprintf("%d, raised by the harness and inherited by every process it starts", n)
}

func firstField(s string) float64 {
	var f float64
	fmt.Sscan(s, &f)
	return f
}

func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// mdEscape keeps an error message on one line of Markdown.
func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return s
}

// workDir is a fresh directory for one section's configs and logs.
func workDir(cfg config, key string) (string, error) {
	d := filepath.Join(cfg.work, key)
	return d, os.MkdirAll(d, 0o755)
}
