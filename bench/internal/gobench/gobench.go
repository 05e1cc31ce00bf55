// Package gobench runs `go test -bench` on a package and parses its
// result lines, so Go benchmarks can feed the report's tables.
package gobench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Line is one benchmark result: its name without the Benchmark prefix
// and the -N suffix, and each metric by unit (ns/op, B/op, custom units).
type Line struct {
	Name    string
	Iters   int
	Metrics map[string]float64
}

// Result is a run's lines and the command that produced them.
type Result struct {
	Lines   []Line
	Command string
}

// Run runs the benchmarks matching pattern in pkg (from dir, the module
// root) for benchtime each, bounded by timeout.
func Run(ctx context.Context, dir, pkg, pattern, benchtime string, timeout time.Duration) (Result, error) {
	args := []string{"test", "-run", "^$", "-bench", pattern, "-benchmem", "-benchtime", benchtime, "-count", "1",
		"-timeout", timeout.String(), pkg}
	res := Result{Command: "go " + strings.Join(args, " ")}
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("%s: %v: %s", res.Command, err, tail(out))
	}
	res.Lines = Parse(out)
	if len(res.Lines) == 0 {
		return res, fmt.Errorf("%s: no benchmark lines: %s", res.Command, tail(out))
	}
	return res, nil
}

// Parse reads benchmark result lines from go test output.
func Parse(out []byte) []Line {
	var lines []Line
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		l := Line{Name: name, Iters: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			l.Metrics[f[i+1]] = v
		}
		lines = append(lines, l)
	}
	return lines
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
