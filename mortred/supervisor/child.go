package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"
)

// State is a child's lifecycle state.
type State string

// The states of the spec.
const (
	StateStopped  State = "stopped"
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateBackoff  State = "backoff"
	StateFailed   State = "failed"
)

// Policy says when a child that exited is started again.
type Policy string

// Restart policies.
const (
	PolicyOnFailure Policy = "on-failure"
	PolicyAlways    Policy = "always"
	PolicyNo        Policy = "no"
)

// Backoff parameters of the notes: 500 ms doubling to 30 s, at most 5
// restarts per crash window, the window reset after 5 minutes ready.
const (
	backoffStart    = 500 * time.Millisecond
	backoffCap      = 30 * time.Second
	maxRestarts     = 5
	crashWindowHeal = 5 * time.Minute
)

// Spec describes one child process.
type Spec struct {
	Name string
	Path string
	Args []string
	// Env is the child's whole environment (tokens travel here, never on
	// the command line).
	Env []string
	Dir string
	// ReadyURL is polled with GET; 200 means ready. Empty means ready once
	// the process runs.
	ReadyURL string
	Policy   Policy
	// StopGrace is the time between SIGTERM and SIGKILL; 0 means 10 s.
	StopGrace time.Duration
	// StartTimeout bounds the wait for readiness; a child not ready by then
	// is killed and counts as a crash. 0 means 2 minutes.
	StartTimeout time.Duration
}

// Status is a child's externally visible state.
type Status struct {
	State          State  `json:"state"`
	PID            int    `json:"pid"`
	Ready          bool   `json:"ready"`
	RestartCount   int    `json:"restart_count"`
	LastExitStatus string `json:"last_exit_status"`
	StartedAtMS    int64  `json:"started_at_ms"`
	Error          string `json:"error"`
}

// Child supervises one process. One goroutine (run) owns the process; the
// methods send it commands, so Start and Stop are safe to call repeatedly
// and concurrently.
type Child struct {
	spec Spec
	log  *RingLog
	lg   *slog.Logger

	cmds chan command

	mu     sync.Mutex
	status Status

	done chan struct{}
}

type command struct {
	op    string // "start", "stop", "restart"
	reply chan error
}

// NewChild prepares a child; Run must be running for commands to act.
func NewChild(spec Spec, log *RingLog, lg *slog.Logger) *Child {
	if spec.StopGrace <= 0 {
		spec.StopGrace = 10 * time.Second
	}
	if spec.StartTimeout <= 0 {
		spec.StartTimeout = 2 * time.Minute
	}
	if spec.Policy == "" {
		spec.Policy = PolicyOnFailure
	}
	return &Child{spec: spec, log: log, lg: lg.With("child", spec.Name),
		cmds: make(chan command), status: Status{State: StateStopped}, done: make(chan struct{})}
}

// Status returns a copy of the current status.
func (c *Child) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Log is the child's output.
func (c *Child) Log() *RingLog { return c.log }

// Name is the child's name.
func (c *Child) Name() string { return c.spec.Name }

func (c *Child) setStatus(f func(*Status)) {
	c.mu.Lock()
	f(&c.status)
	c.mu.Unlock()
}

// Start asks the child to run. It returns once the process is launched (not
// ready), or with the launch error.
func (c *Child) Start(ctx context.Context) error { return c.send(ctx, "start") }

// Stop stops the child (SIGTERM, then SIGKILL after the grace period) and
// returns once it has exited.
func (c *Child) Stop(ctx context.Context) error { return c.send(ctx, "stop") }

// Restart stops the child if running and starts it again.
func (c *Child) Restart(ctx context.Context) error { return c.send(ctx, "restart") }

func (c *Child) send(ctx context.Context, op string) error {
	cmd := command{op: op, reply: make(chan error, 1)}
	select {
	case c.cmds <- cmd:
	case <-c.done:
		return errors.New("supervisor is shutting down")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-cmd.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// proc is one launched process instance.
type proc struct {
	cmd    *exec.Cmd
	exited chan error // receives Wait's result once
	cancel context.CancelFunc
	reason *lastError // the stderr line that says why it ended
}

// Run owns the child until ctx ends; then it stops the process and returns.
func (c *Child) Run(ctx context.Context) {
	defer close(c.done)
	defer func() {
		if r := recover(); r != nil {
			c.lg.Error("supervisor_child_panic", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	var (
		p          *proc
		want       bool
		backoff    = backoffStart
		crashes    int
		readySince time.Time
		retry      *time.Timer
		retryC     <-chan time.Time
		readyC     = make(chan bool, 1)
		startLimit <-chan time.Time
		timedOut   bool // the running process was killed for not getting ready in time
	)
	stopRetry := func() {
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
	}
	launch := func() error {
		np, err := c.launch(readyC)
		if err != nil {
			c.setStatus(func(s *Status) { s.State, s.Error = StateFailed, err.Error() })
			return err
		}
		p = np
		startLimit, timedOut = time.After(c.spec.StartTimeout), false
		return nil
	}
	stop := func() {
		if p == nil {
			return
		}
		exit := describeExit(c.terminate(p))
		c.log.Append("[supervisor] process stopped: " + exit)
		p = nil
		startLimit = nil
		c.setStatus(func(s *Status) { s.State, s.PID, s.Ready, s.LastExitStatus = StateStopped, 0, false, exit })
	}
	for {
		var exited chan error
		if p != nil {
			exited = p.exited
		}
		select {
		case <-ctx.Done():
			stopRetry()
			stop()
			return
		case cmd := <-c.cmds:
			switch cmd.op {
			case "start":
				want = true
				if p == nil {
					stopRetry()
					crashes, backoff = 0, backoffStart
					cmd.reply <- launch()
				} else {
					cmd.reply <- nil
				}
			case "stop":
				want = false
				stopRetry()
				stop()
				c.setStatus(func(s *Status) { s.State, s.Error = StateStopped, "" })
				cmd.reply <- nil
			case "restart":
				want = true
				stopRetry()
				stop()
				crashes, backoff = 0, backoffStart
				cmd.reply <- launch()
			}
		case ready := <-readyC:
			if p == nil {
				continue
			}
			c.setStatus(func(s *Status) {
				s.Ready = ready
				if ready {
					s.State, s.Error = StateRunning, ""
				}
			})
			if ready {
				startLimit = nil
				if readySince.IsZero() {
					readySince = time.Now()
				}
			} else {
				readySince = time.Time{}
			}
		case <-startLimit:
			c.lg.Warn("supervisor_start_timeout", "after", c.spec.StartTimeout)
			c.setStatus(func(s *Status) { s.Error = fmt.Sprintf("not ready within %s; killed", c.spec.StartTimeout) })
			c.terminate(p) // its exit arrives below as a crash
			startLimit = nil
			timedOut = true
		case err := <-exited:
			exit := describeExit(err)
			why := "" // ": <the child's last error line>", or why we killed it
			if r := p.reason.get(); r != "" && failedOnItsOwn(err) {
				why = ": " + r
			}
			if timedOut {
				why, timedOut = fmt.Sprintf(": not ready within %s, so the supervisor killed it", c.spec.StartTimeout), false
			}
			healthy := !readySince.IsZero() && time.Since(readySince) >= crashWindowHeal
			p = nil
			startLimit = nil
			readySince = time.Time{}
			c.lg.Info("supervisor_child_exited", "status", exit, "reason", strings.TrimPrefix(why, ": "))
			c.log.Append("[supervisor] process exited: " + exit)
			c.setStatus(func(s *Status) { s.PID, s.Ready, s.LastExitStatus = 0, false, exit })
			if healthy {
				crashes, backoff = 0, backoffStart
			}
			again := want && (c.spec.Policy == PolicyAlways || (c.spec.Policy == PolicyOnFailure && err != nil))
			switch {
			case !again && err == nil:
				c.setStatus(func(s *Status) { s.State = StateStopped })
				want = false
			case !again:
				c.setStatus(func(s *Status) { s.State, s.Error = StateFailed, "exited ("+exit+")"+why })
				want = false
			case crashes >= maxRestarts:
				c.lg.Error("supervisor_child_failed", "restarts", crashes)
				c.setStatus(func(s *Status) {
					s.State = StateFailed
					s.Error = fmt.Sprintf("exited %d times in a row (last: %s)%s; giving up — fix the cause, then start it again", crashes+1, exit, why)
				})
				want = false
			default:
				crashes++
				c.setStatus(func(s *Status) {
					s.State, s.RestartCount = StateBackoff, s.RestartCount+1
					s.Error = fmt.Sprintf("exited (%s)%s; restarting in %s", exit, why, backoff)
				})
				retry = time.NewTimer(backoff)
				retryC = retry.C
				backoff = min(backoff*2, backoffCap)
			}
		case <-retryC:
			retry, retryC = nil, nil
			if want && p == nil {
				_ = launch()
			}
		}
	}
}

// launch starts a process instance in its own process group with its output
// pumped into the ring log, and its readiness probed.
func (c *Child) launch(readyC chan bool) (*proc, error) {
	cmd := exec.Command(c.spec.Path, c.spec.Args...)
	cmd.Env = c.spec.Env
	cmd.Dir = c.spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	c.setStatus(func(s *Status) { s.State, s.Ready, s.Error = StateStarting, false, "" })
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.spec.Path, err)
	}
	now := time.Now()
	c.setStatus(func(s *Status) { s.PID, s.StartedAtMS = cmd.Process.Pid, now.UnixMilli() })
	c.log.Append(fmt.Sprintf("[supervisor] started pid %d", cmd.Process.Pid))
	c.lg.Info("supervisor_child_started", "pid", cmd.Process.Pid)

	ctx, cancel := context.WithCancel(context.Background())
	p := &proc{cmd: cmd, exited: make(chan error, 1), cancel: cancel, reason: &lastError{prog: filepath.Base(c.spec.Path) + ": "}}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); c.log.pump(stdout, nil) }()
	go func() { defer pumps.Done(); c.log.pump(stderr, p.reason.observe) }()
	go func() {
		// Pipes are drained before Wait, as os/exec requires.
		pumps.Wait()
		err := cmd.Wait()
		cancel()
		p.exited <- err
	}()
	go c.probeReady(ctx, readyC)
	return p, nil
}

// probeReady reports readiness changes until ctx ends.
func (c *Child) probeReady(ctx context.Context, readyC chan bool) {
	send := func(v bool) {
		select {
		case readyC <- v:
		case <-ctx.Done():
		}
	}
	if c.spec.ReadyURL == "" {
		send(true)
		return
	}
	client := &http.Client{Timeout: 2 * time.Second}
	last := false
	interval := 200 * time.Millisecond
	for {
		ready := false
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.spec.ReadyURL, nil)
		if resp, err := client.Do(req); err == nil {
			ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if ready != last {
			send(ready)
			last = ready
		}
		if ready {
			interval = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// terminate sends SIGTERM to the process group, then SIGKILL after the
// grace period, waits for the exit and returns Wait's result. The result is
// also left in p.exited for a loop that still selects on it.
func (c *Child) terminate(p *proc) error {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(c.spec.StopGrace):
		c.lg.Warn("supervisor_child_kill", "after", c.spec.StopGrace)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		err = <-p.exited
	}
	p.exited <- err
	// Whatever the group left behind goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	p.cancel()
	return err
}

// failedOnItsOwn reports an exit with a non-zero status: the process ended
// itself, so its last error line is the reason. A signal (a kill from us or
// from outside) says nothing about what the process last logged.
func failedOnItsOwn(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && !ws.Signaled() && ws.ExitStatus() != 0
}

func describeExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	return err.Error()
}
