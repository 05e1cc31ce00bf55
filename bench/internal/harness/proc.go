// Package harness runs the processes a benchmark measures: start with an
// optional CPU pin, wait until they answer, read their memory from /proc,
// and stop them (gracefully, then forced), each log kept in a file so a
// failed start can say why.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
const StopGrace = 5 * time.Second

// Spec describes one child process.
type Spec struct {
	// Name labels the process in errors and names its log file.
	Name string
	// Bin is the executable; Args its arguments.
	Bin  string
	Args []string
	// Env is added to the harness's own environment (later entries win).
	Env []string
	// CPUs pins the process with `taskset -c CPUs` ("" = no pin).
	CPUs string
	// Dir is the working directory ("" = the harness's).
	Dir string
}

// Proc is one started child. Stop is safe to call more than once and from
// several goroutines.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{}
	waitErr error
	stop    sync.Once
}

// Start starts spec with its stdout and stderr in logDir/<name>.log. The
// child gets its own process group so Stop also ends what it spawned.
func Start(logDir string, spec Spec) (*Proc, error) {
	if _, err := os.Stat(spec.Bin); err != nil && !strings.ContainsRune(spec.Bin, '/') {
		if p, lerr := exec.LookPath(spec.Bin); lerr == nil {
			spec.Bin = p
		}
	}
	logPath := filepath.Join(logDir, spec.Name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	bin, args := spec.Bin, spec.Args
	if spec.CPUs != "" {
		// taskset execs the binary in place, so the PID is the server's.
		bin, args = "taskset", append([]string{"-c", spec.CPUs, spec.Bin}, spec.Args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Dir = spec.Dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", spec.Name, spec.Bin, err)
	}
	p := &Proc{Name: spec.Name, LogPath: logPath, cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the child's process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed when the child has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the child's process group, waits up to StopGrace,
// then sends SIGKILL.
func (p *Proc) Stop() {
	p.stop.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(StopGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	})
}

// Tail is the end of the child's log, for error messages.
func (p *Proc) Tail() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 1500 {
		s = "…" + s[len(s)-1500:]
	}
	return s
}

// RSS is the child's resident set size in bytes (VmRSS in /proc).
func (p *Proc) RSS() (int64, error) { return RSSOf(p.PID()) }

// RSSOf reads VmRSS of pid from /proc/<pid>/status.
func RSSOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// Eventually polls cond every 50 ms until it returns nil, the timeout
// passes, or one of procs exits (a server that died will never answer).
func Eventually(ctx context.Context, timeout time.Duration, what string, cond func() error, procs ...*Proc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = cond(); last == nil {
			return nil
		}
		for _, p := range procs {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s: %s exited (%v) while waiting; log %s:\n%s", what, p.Name, err, p.LogPath, p.Tail())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s: %w", what, timeout, errors.Join(last, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitListening waits until a TCP connection to addr succeeds, for at
// most timeout or until proc exits.
func WaitListening(ctx context.Context, timeout time.Duration, what, addr string, proc *Proc) error {
	return Eventually(ctx, timeout, what+" listening on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}, proc)
}

// GetJSON GETs url through c with header, fails on any status but 200,
// and decodes the body into v (when not nil): the readiness and status
// checks of the benchmarks and the soak.
func GetJSON(ctx context.Context, c *http.Client, url string, header http.Header, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for k, vv := range header {
		req.Header[k] = vv
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
