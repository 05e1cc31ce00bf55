package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// Fault bounds: how long a stop lasts, and the gap between injections.
const (
	stopMin, stopMax = 3 * time.Second, 8 * time.Second
	gapMin, gapMax   = 10 * time.Second, 30 * time.Second
	// recoverCap bounds the wait for a recovery; past it the fault is
	// reported as not recovered and the run goes on.
	recoverCap = 2 * time.Minute
	// attributionSlack widens a fault's window at its end: a request that
	// failed this soon after recovery is still the fault's.
	attributionSlack = 5 * time.Second
	// modelKillsPer5Min keeps the supervisor's crash-loop guard (five
	// restarts without five minutes of readiness mark a server failed)
	// out of the way: that guard is a feature, not something to trip.
	modelKillsPer5Min = 3
	// linkBound: when a cut link comes back, a probe sent while it was
	// down may still be waiting out its timeout, twice (the router
	// retries a failed probe on a fresh connection); then one probe
	// round, and the daemon watcher's poll.
	linkBound = 2*ProbeTimeout + 2*ProbeInterval
)

// faultKind is one kind of fault: what it hits, how it is injected and
// lifted, and what counts as recovered.
type faultKind struct {
	name string
	// bound is the documented recovery bound, from the fault's end.
	bound time.Duration
	// weight is how often the schedule picks this kind against the
	// others (0 means 1).
	weight float64
	// lossless faults are ones the topology is built to absorb (a
	// graceful router restart behind Nginx, a full log disk): a request
	// that fails during one is not excused by it.
	lossless bool
	targets  func(*run) []string
	// inject injects the fault on target and returns once it is lifted.
	inject func(ctx context.Context, r *run, target string, rnd *rand.Rand) error
	// recovered returns nil once target serves again.
	recovered func(ctx context.Context, r *run, target string) error
}

func engineTargets(r *run) []string {
	var out []string
	for _, e := range r.mentat.engines {
		out = append(out, e.group)
	}
	return out
}

func routerTargets(r *run) []string {
	var out []string
	for i := range r.mentat.routers {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

func modelTargets(r *run) []string {
	var out []string
	for _, m := range mortredModels {
		out = append(out, m.id)
	}
	return out
}

// groupBack: the engine answers again and both routers admit its group.
func groupBack(ctx context.Context, r *run, g string) error {
	if err := getOK(ctx, r.mentat.engine(g).url()+"/v1/models"); err != nil {
		return err
	}
	for i := range r.mentat.routers {
		if err := r.mentat.groupsHealthy(ctx, i, []string{g}); err != nil {
			return err
		}
	}
	return nil
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func stopFor(rnd *rand.Rand) time.Duration {
	return stopMin + time.Duration(rnd.Int64N(int64(stopMax-stopMin)))
}

// stopCont stops pid for a while and resumes it, even when ctx ends.
func stopCont(ctx context.Context, pid int, rnd *rand.Rand) error {
	if pid == 0 {
		return errors.New("not running")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	pause(ctx, stopFor(rnd))
	return syscall.Kill(pid, syscall.SIGCONT)
}

// waitEngine waits until the group's engine (a new one, after a kill)
// answers.
func waitEngine(ctx context.Context, r *run, g string) error {
	e := r.mentat.engine(g)
	return harness.Eventually(ctx, recoverCap, "engine "+g+" back", func() error { return getOK(ctx, e.url()+"/v1/models") })
}

var kinds = []faultKind{
	{name: "sigkill-engine", bound: 2*ProbeInterval + time.Second, targets: engineTargets,
		inject: func(ctx context.Context, r *run, g string, _ *rand.Rand) error {
			e := r.mentat.engine(g)
			pid := e.pid()
			if pid == 0 {
				return errors.New("engine not running")
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return err
			}
			// Its agent exits with it and is restarted, with a new engine.
			for e.pid() == pid && ctx.Err() == nil {
				pause(ctx, 20*time.Millisecond)
			}
			return waitEngine(ctx, r, g)
		}, recovered: groupBack},
	{name: "sigstop-engine", bound: 2*ProbeInterval + time.Second, targets: engineTargets,
		inject: func(ctx context.Context, r *run, g string, rnd *rand.Rand) error {
			return stopCont(ctx, r.mentat.engine(g).pid(), rnd)
		}, recovered: groupBack},
	{name: "sigkill-agent", bound: 2*ProbeInterval + time.Second, targets: engineTargets,
		inject: func(ctx context.Context, r *run, g string, _ *rand.Rand) error {
			e := r.mentat.engine(g)
			old := e.pid()
			if err := e.agent.kill(); err != nil {
				return err
			}
			// The engine gets SIGTERM from the kernel and stops; the
			// agent is restarted with a new one.
			for (e.pid() == 0 || e.pid() == old) && ctx.Err() == nil {
				pause(ctx, 20*time.Millisecond)
			}
			return waitEngine(ctx, r, g)
		}, recovered: groupBack},
	{name: "sigstop-agent", bound: 2*ProbeInterval + time.Second, targets: engineTargets,
		inject: func(ctx context.Context, r *run, g string, rnd *rand.Rand) error {
			return stopCont(ctx, r.mentat.engine(g).agent.pid(), rnd)
		}, recovered: groupBack},
	{name: "restart-router", bound: 5 * time.Second, lossless: true, targets: routerTargets,
		inject: func(ctx context.Context, r *run, i string, _ *rand.Rand) error {
			return r.mentat.routers[atoi(i)].restart(false)
		}, recovered: routerBack},
	{name: "sigkill-router", bound: 5 * time.Second, targets: routerTargets,
		inject: func(ctx context.Context, r *run, i string, _ *rand.Rand) error {
			return r.mentat.routers[atoi(i)].restart(true)
		}, recovered: routerBack},
	{name: "sigkill-model", bound: 30 * time.Second, targets: modelTargets,
		inject: func(ctx context.Context, r *run, id string, _ *rand.Rand) error {
			pid := r.mortred.pidOf(ctx, id)
			if pid == 0 {
				return errors.New("model server not running")
			}
			// The supervisor restarts it (restart_policy on-failure).
			return syscall.Kill(pid, syscall.SIGKILL)
		}, recovered: modelBack},
	{name: "sigstop-model", bound: 10 * time.Second, targets: modelTargets,
		inject: func(ctx context.Context, r *run, id string, rnd *rand.Rand) error {
			return stopCont(ctx, r.mortred.pidOf(ctx, id), rnd)
		}, recovered: modelBack},
	// Both restarts below replace the gateway: half as often as the
	// rest, so that it lives long enough (its warm-up and two minutes
	// more) for its health to be judged, as every other process's is.
	{name: "restart-gateway", bound: 10 * time.Second, weight: 0.5, targets: func(*run) []string { return []string{"gateway"} },
		inject: func(ctx context.Context, r *run, _ string, _ *rand.Rand) error {
			pid := r.mortred.pidOf(ctx, "gateway")
			if pid == 0 {
				return errors.New("gateway not running")
			}
			// It drains and exits; the supervisor starts a new one.
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				return err
			}
			return harness.Eventually(ctx, recoverCap, "a new gateway from the supervisor", func() error {
				if p := r.mortred.pidOf(ctx, "gateway"); p == 0 || p == pid {
					return errors.New("the old gateway, or none, runs")
				}
				return nil
			})
		}, recovered: func(ctx context.Context, r *run, _ string) error { return getOK(ctx, r.mortred.gateway()+"/readyz") }},
	{name: "restart-supervisor", bound: 60 * time.Second, weight: 0.5, targets: func(*run) []string { return []string{"supervisor"} },
		inject: func(ctx context.Context, r *run, _ string, _ *rand.Rand) error {
			return r.mortred.sup.restart(false)
		}, recovered: func(ctx context.Context, r *run, _ string) error {
			for _, m := range mortredModels {
				if err := getOK(ctx, r.mortred.gateway()+"/readyz?model="+m.id); err != nil {
					return err
				}
			}
			return nil
		}},
	{name: "link-down", bound: linkBound, targets: func(r *run) []string {
		if r.node == nil {
			return nil
		}
		return []string{nodeName}
	}, inject: func(ctx context.Context, r *run, _ string, rnd *rand.Rand) error {
		if err := r.lan.Do(r.node.Cut); err != nil {
			return err
		}
		pause(ctx, 5*time.Second+time.Duration(rnd.Int64N(int64(10*time.Second))))
		return r.lan.Do(r.node.Restore)
	}, recovered: func(ctx context.Context, r *run, _ string) error {
		for _, e := range r.mentat.engines {
			if e.node != "" {
				return groupBack(ctx, r, e.group)
			}
		}
		return nil
	}},
	{name: "disk-full", bound: 10 * time.Second, lossless: true,
		targets: func(r *run) []string {
			if !r.tmpfs {
				return nil
			}
			return []string{"disk"}
		},
		inject: func(ctx context.Context, r *run, _ string, rnd *rand.Rand) error {
			return fillDisk(ctx, r.diskDir, 10*time.Second+time.Duration(rnd.Int64N(int64(10*time.Second))))
		}, recovered: func(ctx context.Context, r *run, _ string) error { return r.probeBoth(ctx) }},
}

func routerBack(ctx context.Context, r *run, i string) error {
	n := atoi(i)
	if err := getOK(ctx, r.mentat.routerURL(n)+"/readyz"); err != nil {
		return err
	}
	return r.mentat.groupsHealthy(ctx, n, nil)
}

func modelBack(ctx context.Context, r *run, id string) error {
	return getOK(ctx, r.mortred.gateway()+"/readyz?model="+id)
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// targetName is the component a fault on target hits, as request paths
// name them.
func targetName(kind, target string) string {
	switch kind {
	case "sigkill-engine", "sigstop-engine":
		return "engine-" + target
	case "sigkill-agent", "sigstop-agent":
		return "agent-" + target
	case "restart-router", "sigkill-router":
		return fmt.Sprintf("router-%d", atoi(target)+1)
	case "sigkill-model", "sigstop-model":
		return "model-" + target
	}
	return target
}

// fillDisk fills the log disk for hold, then frees it.
func fillDisk(ctx context.Context, dir string, hold time.Duration) error {
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			f.Close()
			return err
		}
	}
	// The last partial blocks too.
	for _, n := range []int{64 << 10, 4 << 10, 512} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
	f.Close()
	pause(ctx, hold)
	return nil
}

// schedule injects faults until ctx ends or until stopAt, one at a time,
// each 10–30 s after the previous one began, from a seeded stream.
func (r *run) schedule(ctx context.Context, rnd *rand.Rand, stopAt time.Time) {
	killed := map[string][]time.Time{}
	next := time.Now().Add(r.cfg.Warmup / 2)
	for {
		pause(ctx, time.Until(next))
		if ctx.Err() != nil || time.Now().After(stopAt) {
			return
		}
		next = time.Now().Add(gapMin + time.Duration(rnd.Int64N(int64(gapMax-gapMin))))
		k, target := r.pick(rnd, killed)
		if k == nil {
			continue
		}
		f := &record.Fault{Kind: k.name, Target: targetName(k.name, target), Start: time.Now(), Bound: k.bound}
		r.rec.Fault(f)
		r.logf("fault %s on %s", k.name, f.Target)
		err := k.inject(ctx, r, target, rnd)
		end := time.Now()
		r.rec.Edit(func() {
			f.End = end
			if err != nil {
				f.Note = "inject: " + err.Error()
			}
		})
		for deadline := end.Add(recoverCap); ; {
			if k.recovered(ctx, r, target) == nil {
				at := time.Now()
				r.rec.Edit(func() { f.Recovered = at })
				r.logf("  recovered in %s (bound %s)", at.Sub(end).Round(10*time.Millisecond), k.bound)
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				r.rec.Edit(func() { f.Note += fmt.Sprintf(" not recovered within %s", recoverCap) })
				r.logf("  NOT recovered within %s", recoverCap)
				break
			}
			pause(ctx, 100*time.Millisecond)
		}
	}
}

// pick chooses a fault kind and target, skipping model servers killed
// too often lately.
func (r *run) pick(rnd *rand.Rand, killed map[string][]time.Time) (*faultKind, string) {
	for range 20 {
		k := pickKind(rnd)
		ts := k.targets(r)
		if len(ts) == 0 {
			continue
		}
		t := ts[rnd.IntN(len(ts))]
		if k.name == "sigkill-model" {
			var recent []time.Time
			for _, at := range killed[t] {
				if time.Since(at) < 5*time.Minute {
					recent = append(recent, at)
				}
			}
			if len(recent) >= modelKillsPer5Min {
				continue
			}
			killed[t] = append(recent, time.Now())
		}
		return k, t
	}
	return nil, ""
}

// lossless reports whether a fault kind is one no request may fail for.
func lossless(kind string) bool {
	for _, k := range kinds {
		if k.name == kind {
			return k.lossless
		}
	}
	return false
}

// pickKind draws a fault kind by weight.
func pickKind(rnd *rand.Rand) *faultKind {
	total := 0.0
	for i := range kinds {
		total += kindWeight(&kinds[i])
	}
	x := rnd.Float64() * total
	for i := range kinds {
		if x -= kindWeight(&kinds[i]); x < 0 {
			return &kinds[i]
		}
	}
	return &kinds[len(kinds)-1]
}

func kindWeight(k *faultKind) float64 {
	if k.weight <= 0 {
		return 1
	}
	return k.weight
}
