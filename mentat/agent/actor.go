package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"syscall"

	"github.com/fe64bb06/frontdoor/mentat/daemon"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// actor runs the engine command as this agent's one actor: spawning until
// the process starts, running while it lives, dead with the exit reason
// after. The child gets its own process group so that signals the agent
// passes through reach every process of the engine, and its output goes
// straight to the agent's stdout and stderr.
type actor struct {
	id     string
	name   string
	argv   []string
	log    *slog.Logger
	report func(id string, s daemon.ActorState)
	cmd    *exec.Cmd
}

func newActorID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "a:" + hex.EncodeToString(b[:])
}

// spawning reports the actor before its process exists.
func (a *actor) spawning() {
	a.report(a.id, daemon.ActorState{Name: a.name, State: wire.ActorSpawning})
}

// start starts the process and reports running. On error it has reported
// dead and returns the exit status the agent should use (127 not found,
// 126 otherwise, as shells do).
func (a *actor) start() (int, error) {
	cmd := exec.Command(a.argv[0], a.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	// Pdeathsig: an agent killed outright (SIGKILL, the OOM killer) must
	// not leave its engine running with nobody to report it; the next
	// agent's engine would find the port taken. SIGTERM lets the engine
	// stop as it would when told to. The kernel ties this to the thread
	// that forked, and the Go runtime ends a thread only when a goroutine
	// locked to it exits, which start never does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = 127
		}
		reason := "start failed: " + err.Error()
		a.log.Error("actor_start_failed", "actor", a.id, "command", a.argv[0], "error", err)
		a.report(a.id, daemon.ActorState{Name: a.name, State: wire.ActorDead, Reason: reason})
		return code, err
	}
	a.cmd = cmd
	a.log.Info("actor_running", "actor", a.id, "name", a.name, "pid", cmd.Process.Pid)
	a.report(a.id, daemon.ActorState{Name: a.name, State: wire.ActorRunning, PID: cmd.Process.Pid})
	return 0, nil
}

// signal passes sig to the child's process group.
func (a *actor) signal(sig syscall.Signal) {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-a.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		a.log.Warn("signal_failed", "signal", sig.String(), "error", err)
	}
}

// wait waits for the child, reports dead with the reason and returns the
// exit status the agent should exit with (128+N for signal N).
func (a *actor) wait() int {
	err := a.cmd.Wait()
	st := a.cmd.ProcessState
	code, reason := exitReason(st, err)
	a.log.Info("actor_dead", "actor", a.id, "pid", a.cmd.Process.Pid, "reason", reason)
	a.report(a.id, daemon.ActorState{Name: a.name, State: wire.ActorDead, Reason: reason, PID: a.cmd.Process.Pid})
	return code
}

func exitReason(st *os.ProcessState, err error) (int, string) {
	if st == nil {
		return 1, fmt.Sprintf("wait failed: %v", err)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		return 128 + int(sig), fmt.Sprintf("killed by signal %d (%s)", int(sig), sig)
	}
	return st.ExitCode(), fmt.Sprintf("exited with status %d", st.ExitCode())
}
