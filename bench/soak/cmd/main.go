// Command soak runs the chaos soak (`make soak`): SOAK_DURATION (default
// 30m), SOAK_SEED (default 1), SOAK_OUT (the report, default
// docs/soak.md), SOAK_DIR (configs and logs; a temporary directory when
// unset). It exits 0 only when the run met every target, 0 defects first.
//
// SOAK_FROM names the report-input.json of a run kept with SOAK_DIR: the
// report is then judged and written again from it alone, and the exit
// status is the same rule applied to it; nothing is started.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/bench/soak"
	"github.com/fe64bb06/frontdoor/internal/testbin"
)

func main() {
	os.Exit(run())
}

func run() int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "soak: "+format+"\n", a...)
		return 2
	}
	root, err := testbin.Root()
	if err != nil {
		return fail("%v", err)
	}
	cfg := soak.Config{Root: root, BinDir: filepath.Join(root, "bin"), Duration: 30 * time.Minute, Seed: 1,
		Out: filepath.Join(root, "docs", "soak.md"), WorkDir: os.Getenv("SOAK_DIR")}
	if v := os.Getenv("SOAK_OUT"); v != "" {
		cfg.Out = v
	}
	if from := os.Getenv("SOAK_FROM"); from != "" {
		sum, err := soak.Rerender(from, cfg.Out)
		if err != nil {
			return fail("%v", err)
		}
		return summary(sum, cfg.Out)
	}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		if cfg.Duration, err = time.ParseDuration(v); err != nil || cfg.Duration < time.Minute {
			return fail("SOAK_DURATION=%q: want a Go duration of at least 1m, e.g. 30m", v)
		}
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		if cfg.Seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fail("SOAK_SEED=%q: want an integer", v)
		}
	}
	cfg.Command = fmt.Sprintf("make soak SOAK_DURATION=%s SOAK_SEED=%d", cfg.Duration, cfg.Seed)
	if cfg.WorkDir != "" {
		if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
			return fail("%v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := soak.Run(ctx, cfg)
	if err != nil {
		return fail("%v", err)
	}
	return summary(sum, cfg.Out)
}

// summary prints what a run (or a rerender) found and is the exit
// status: 0 when every target was met, 1 when one was missed.
func summary(sum soak.Summary, out string) int {
	fmt.Printf("soak: %d requests judged, %d faults; report %s\n", sum.Results, sum.Faults, out)
	for o, n := range sum.Outcomes {
		fmt.Printf("  %s: %d\n", o, n)
	}
	for _, t := range sum.Targets {
		mark := "met"
		if !t.Met {
			mark = "MISSED"
		}
		fmt.Printf("  [%s] %s: %s\n", mark, t.Goal, t.Measured)
	}
	if !sum.OK() {
		return 1
	}
	return 0
}
