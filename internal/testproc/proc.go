// Package testproc holds what process-level tests share, so that each
// package does not write it again:
//
//   - Start runs a real binary as a child of the test, the way an operator
//     would, with one lifecycle: its own process group, output kept in a
//     file and logged only when the test fails, and at cleanup SIGTERM,
//     then SIGKILL of the whole group after a grace period. Background is
//     the same for a server run in the test's own process.
//   - Main is the TestMain of such a package: binaries built first by
//     internal/testbin, removed after, and a goroutine leak check; Bin
//     finds a binary from a test.
//   - Eventually and Until poll a condition with a deadline; FreePort,
//     FreeUDPPort and SendUDP deal in loopback ports; GetJSON reads an
//     answer; Alive and RSSKiB read /proc; Buffer is a log sink that may
//     be read while written.
package testproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DefaultGrace is how long Stop at cleanup waits after SIGTERM before it
// kills the process group, unless Options.Grace says otherwise.
const DefaultGrace = 10 * time.Second

// failureTail bounds the output a failed test logs per process.
const failureTail = 64 << 10

// Options describe one child process. The zero value runs argv with the
// test's environment in the test's directory.
type Options struct {
	// Name labels the process in messages; default the base name of argv[0].
	Name string
	// Env is the whole environment; nil inherits the test's (os/exec's rule).
	Env []string
	// Dir is the working directory; "" is the test's.
	Dir string
	// Grace is how long cleanup waits after SIGTERM before SIGKILL of the
	// process group; zero means DefaultGrace.
	Grace time.Duration
	// MustStop fails the test if cleanup has to SIGKILL the process: a
	// binary that ignores SIGTERM is then a bug, not a slow stop.
	MustStop bool
	// Timeout, if positive, bounds the whole run: a process still running
	// that long after start is stopped as at cleanup (SIGTERM, then SIGKILL
	// after Grace).
	Timeout time.Duration
}

// Proc is one started process. Its methods are safe for concurrent use.
type Proc struct {
	name string
	cmd  *exec.Cmd
	log  string // the output file
	done chan struct{}
}

// Start runs argv[0] with the rest as arguments and returns once it has
// started (a failed start fails the test).
//
// The process gets its own process group, so that a kill also ends what it
// spawned, and is killed by the kernel if the test binary dies first. Its
// stdout and stderr go to one file rather than a pipe: a child that hands
// its stdout to a grandchild (an agent's engine) would otherwise keep Wait
// blocked for as long as the grandchild lives. When the test ends it is
// stopped (see Stop) and, if the test failed, the end of its output is
// logged.
func Start(t testing.TB, o Options, argv ...string) *Proc {
	t.Helper()
	if o.Name == "" {
		o.Name = filepath.Base(argv[0])
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	f, err := os.CreateTemp(t.TempDir(), "output-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := &Proc{name: o.Name, log: f.Name(), done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env, p.cmd.Dir = o.Env, o.Dir
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", o.Name, err)
	}
	var timer *time.Timer
	if o.Timeout > 0 {
		timer = time.AfterFunc(o.Timeout, func() { p.Stop(o.Grace) })
	}
	go func() {
		_ = p.cmd.Wait()
		if timer != nil {
			timer.Stop()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.Stop(o.Grace) && o.MustStop {
			t.Errorf("%s did not stop within %v of SIGTERM; killed its process group", o.Name, o.Grace)
		}
		if t.Failed() {
			t.Logf("--- output of %s (%s):\n%s", o.Name, strings.Join(argv, " "), Tail(p.Output(), failureTail))
		}
	})
	return p
}

// Tail is the last n bytes of s, marked as cut when it is.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Name is the label given in Options.
func (p *Proc) Name() string { return p.name }

// PID is the process id, which is also its process group's id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Output is everything the process (and any child it handed its output
// to) has written so far, stdout and stderr interleaved.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process alone.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// SignalGroup sends sig to the process's whole group, as a terminal's
// Ctrl-C does.
func (p *Proc) SignalGroup(sig syscall.Signal) error { return syscall.Kill(-p.PID(), sig) }

// Stop sends SIGCONT (in case a test froze the process) and SIGTERM, waits
// up to grace for the exit, then kills the whole process group and waits.
// It reports whether it had to kill. Safe to repeat and to call
// concurrently; a process that has exited is left alone.
func (p *Proc) Stop(grace time.Duration) (killed bool) {
	if p.Exited() {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return false
	case <-time.After(grace):
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.done
		return true
	}
}

// ExitCode waits up to timeout for the exit and returns the exit code, -1
// if a signal ended the process; ok is false if it is still running.
func (p *Proc) ExitCode(timeout time.Duration) (code int, ok bool) {
	st, ok := p.State(timeout)
	if !ok {
		return 0, false
	}
	return st.ExitCode(), true
}

// State waits up to timeout for the exit and returns how the process ended;
// ok is false if it is still running.
func (p *Proc) State(timeout time.Duration) (st *os.ProcessState, ok bool) {
	select {
	case <-p.done:
	default:
		select {
		case <-p.done:
		case <-time.After(timeout):
			return nil, false
		}
	}
	return p.cmd.ProcessState, true
}

// WaitOutput waits up to timeout for the output to match re and returns
// the submatches. It fails the test at once if the process exits without
// having written a match.
func (p *Proc) WaitOutput(t testing.TB, timeout time.Duration, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	Eventually(t, timeout, p.name+" logs "+re, func() error {
		exited := p.Exited() // before reading: output written before the exit is then seen
		if m = rx.FindStringSubmatch(p.Output()); m != nil {
			return nil
		}
		if exited {
			t.Fatalf("%s exited before logging %s:\n%s", p.name, re, Tail(p.Output(), 4000))
		}
		return errNoMatch
	})
	return m
}

var errNoMatch = errors.New("no match yet")
