// Command report runs every side-by-side benchmark in one run and writes
// docs/benchmarks.md: the machine, the exact commands, the tables, and
// each target met or missed. `make bench` runs it through scripts/bench.sh.
//
//	go build -o /tmp/bench-report ./bench/report && /tmp/bench-report -d 5s
//
// It needs the binaries in bin/ (make build), wrk and nginx (make
// setup-deb), and for the PP-OCR section the ONNX Runtime library and
// models (make setup-models).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/sse"
	"github.com/fe64bb06/frontdoor/bench/router/floor"
	"github.com/fe64bb06/frontdoor/bench/routing"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == sse.ChildArg {
		os.Exit(sse.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == floor.ChildArg {
		os.Exit(floor.Main(os.Args[2:]))
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/report:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	var cfg config
	flag.StringVar(&cfg.binDir, "bin", filepath.Join(root, "bin"), "directory with the built binaries (make build)")
	flag.StringVar(&cfg.out, "out", filepath.Join(root, "docs", "benchmarks.md"), "report file")
	flag.DurationVar(&cfg.d, "d", 5*time.Second, "duration of each measurement (wrk takes whole seconds)")
	flag.IntVar(&cfg.rounds, "rounds", 1, "repetitions of each router measurement, paths interleaved (median reported)")
	flag.IntVar(&cfg.idle, "idle-streams", 10000, "idle SSE streams held open through the router")
	flag.StringVar(&cfg.only, "only", strings.Join(sectionKeys(), ","), "comma-separated sections to run")
	flag.BoolVar(&cfg.pin, "pin", runtime.NumCPU() >= 2, "pin servers to CPU 0 and load generators to CPU 1 (needs 2 CPUs)")
	flag.Func("routing-replicas", "comma-separated cluster sizes of the routing section (default 2,4)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a replica count", f)
			}
			cfg.routingReplicas = append(cfg.routingReplicas, n)
		}
		return nil
	})
	flag.Func("routing-workloads", "comma-separated workloads of the routing section (default: all; shared,distinct,preloaded)", func(v string) error {
		cfg.routingWorkloads = splitList(v)
		return nil
	})
	flag.Func("routing-policies", "comma-separated policies of the routing section (default: all; "+strings.Join(routing.Policies, ",")+")", func(v string) error {
		cfg.routingPolicies = splitList(v)
		return nil
	})
	flag.StringVar(&cfg.ppocrBin, "ppocr", "", "a built bench/ppocr binary (default: go run ./bench/ppocr)")
	flag.Parse()
	cfg.root = root
	cfg.args = os.Args
	cfg.self, err = os.Executable()
	if err != nil {
		return err
	}
	if cfg.pin {
		cfg.serverCPUs, cfg.loadCPUs = "0", "1"
	}
	cfg.work, err = os.MkdirTemp("", "bench-report-")
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, failed := runSections(ctx, cfg)
	if err := os.WriteFile(cfg.out, []byte(rep), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", cfg.out)
	if failed > 0 {
		return fmt.Errorf("%d section(s) failed (see the report; logs kept in %s)", failed, cfg.work)
	}
	os.RemoveAll(cfg.work)
	return nil
}

// config is the run's settings, shared by every section.
type config struct {
	root, binDir, out, only, work, self, ppocrBin string
	serverCPUs, loadCPUs                          string
	d                                             time.Duration
	rounds, idle                                  int
	routingReplicas                               []int
	routingWorkloads, routingPolicies             []string
	nofile                                        uint64
	pin                                           bool
	args                                          []string
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory: run from the repository")
		}
		dir = parent
	}
}
