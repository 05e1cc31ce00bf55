// Package floorproc starts the net/http floor (bench/router/floor) as a
// child of the benchmark's binary, so every section that shows the floor
// beside its own proxy starts it the same way: pinned like that proxy,
// one listener per upstream, and the command recorded for the report.
package floorproc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/router/floor"
)

// Proc is the running floor proxy.
type Proc struct {
	Proc *harness.Proc
	// Port is each upstream's listening port, by the name Start was given.
	Port map[string]int
	// Command is how it was started, for the report.
	Command string
}

// Start starts `self floor-proxy` pinned to cpus (none when ""), with a
// listener in front of each named upstream port on 127.0.0.1, and waits
// until every listener accepts. name labels its log file in dir.
func Start(ctx context.Context, self, dir, name, cpus string, upstreams map[string]int) (*Proc, error) {
	names := make([]string, 0, len(upstreams))
	for g := range upstreams {
		names = append(names, g)
	}
	sort.Strings(names)
	f := &Proc{Port: map[string]int{}}
	args := []string{floor.ChildArg}
	for _, g := range names {
		p, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		f.Port[g] = p
		args = append(args, fmt.Sprintf("127.0.0.1:%d=http://127.0.0.1:%d", p, upstreams[g]))
	}
	var err error
	if f.Proc, err = harness.Start(dir, harness.Spec{Name: name, Bin: self, Args: args, CPUs: cpus}); err != nil {
		return nil, err
	}
	f.Command = "bench-report " + strings.Join(args, " ")
	if cpus != "" {
		f.Command = "taskset -c " + cpus + " " + f.Command
	}
	for _, g := range names {
		addr := fmt.Sprintf("127.0.0.1:%d", f.Port[g])
		if err := harness.WaitListening(ctx, 10*time.Second, "net/http floor", addr, f.Proc); err != nil {
			f.Proc.Stop()
			return nil, err
		}
	}
	return f, nil
}

// URL is the floor's base URL in front of the named upstream.
func (f *Proc) URL(name string) string {
	return fmt.Sprintf("http://127.0.0.1:%d", f.Port[name])
}
