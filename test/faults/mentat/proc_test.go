package mentat

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one process a test started; it is stopped when the test ends.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  lockedBuffer
	done chan struct{}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cleanEnv is the test's environment without any variable the router, the
// daemon, the agent or the engine reads, plus extra: a developer's shell
// must not change what a test sees.
func cleanEnv(extra ...string) []string {
	prefixes := []string{"MENTAT_", "SERVE_", "POLL_", "PROBE_", "SERVING_", "MCP_", "TOOLS_", "ALLOWED_", "DISCOVER_", "LOG_LEVEL"}
	var out []string
next:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// start runs argv[0] with the rest as arguments. The process dies with the
// test binary (Pdeathsig) and is stopped, SIGTERM then SIGKILL, at cleanup;
// its output is logged when the test failed.
func start(t testing.TB, name string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", name, tail(p.output(), 6000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) output() string { return p.out.String() }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM (after SIGCONT, in case a test froze it) and kills
// the process if it has not exited within grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitLine waits for an output line matching re and returns its submatches.
func (p *proc) waitLine(t testing.TB, timeout time.Duration, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	eventually(t, timeout, p.name+" logs "+re, func() error {
		if m = rx.FindStringSubmatch(p.output()); m != nil {
			return nil
		}
		if p.exited() {
			t.Fatalf("%s exited before logging %s:\n%s", p.name, re, tail(p.output(), 4000))
		}
		return fmt.Errorf("not yet")
	})
	return m
}

// eventually polls cond until it returns nil, failing the test with cond's
// last error after timeout. Deadlines are generous: other engineers build
// and test on the same two cores.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %s: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freeUDPPort returns a UDP port that was free a moment ago.
func freeUDPPort(t testing.TB) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
