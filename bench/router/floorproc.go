package router

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/router/floor"
)

// floorProc is the net/http floor (package floor) running as a child of
// this benchmark's binary, one listener per engine group.
type floorProc struct {
	Proc *harness.Proc
	Port map[string]int
	// Command is how it was started, for the report.
	Command string
}

// startFloor starts `self floor-proxy` pinned to cpus, in front of each
// group's engine port, and waits until every listener accepts.
func startFloor(ctx context.Context, self, dir, cpus string, engines map[string]int) (*floorProc, error) {
	groups := make([]string, 0, len(engines))
	for g := range engines {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	f := &floorProc{Port: map[string]int{}}
	args := []string{floor.ChildArg}
	for _, g := range groups {
		p, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		f.Port[g] = p
		args = append(args, fmt.Sprintf("127.0.0.1:%d=http://127.0.0.1:%d", p, engines[g]))
	}
	var err error
	if f.Proc, err = harness.Start(dir, harness.Spec{Name: "floor-proxy", Bin: self, Args: args, CPUs: cpus}); err != nil {
		return nil, err
	}
	f.Command = strings.Join(args, " ")
	if cpus != "" {
		f.Command = "taskset -c " + cpus + " bench-report " + f.Command
	} else {
		f.Command = "bench-report " + f.Command
	}
	for _, g := range groups {
		addr := fmt.Sprintf("127.0.0.1:%d", f.Port[g])
		err := harness.WaitListening(ctx, 10*time.Second, "net/http floor", addr, f.Proc)
		if err != nil {
			f.Proc.Stop()
			return nil, err
		}
	}
	return f, nil
}

// URL is the floor's base URL in front of group's engine.
func (f *floorProc) URL(group string) string {
	return fmt.Sprintf("http://127.0.0.1:%d", f.Port[group])
}

// cpuTarget is issue 17's goal: router CPU per small request at most
// this many times Nginx's.
const cpuTarget = 2.5

// FloorNote says in words what the floor row means for the router's CPU
// per request: how much of it the library alone costs, and whether the
// library leaves room for the target at all. It is "" when a figure is
// missing.
func FloorNote(router, floor, nginx float64) string {
	if router <= 0 || floor <= 0 || nginx <= 0 {
		return ""
	}
	s := fmt.Sprintf("The net/http floor alone spends %.1f µs of CPU per request, %.2f× Nginx's %.1f µs; the router spends %.1f µs (%.2f×), ",
		floor, floor/nginx, nginx, router, router/nginx)
	switch d := router - floor; {
	case d > 0.05*floor:
		s += fmt.Sprintf("%.1f µs (%.0f%%) of its own work on top of the library. ", d, 100*d/floor)
	case d < -0.05*floor:
		s += fmt.Sprintf("%.1f µs less than this plain use of the library. ", -d)
	default:
		s += "within 5% of the library's own cost. "
	}
	if floor/nginx > cpuTarget {
		return s + fmt.Sprintf("So what limits the router's CPU per request is net/http and http.Transport themselves: "+
			"used plainly they already cost more than %.1f× Nginx on this machine, so the target needs the library's own cost per request to fall, "+
			"not only the router's.", cpuTarget)
	}
	return s + fmt.Sprintf("The library leaves room for %.1f× Nginx; what the router spends beyond that is its own.", cpuTarget)
}
