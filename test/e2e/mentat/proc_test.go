package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testbin"
)

// proc is one started binary. Its output goes to a file rather than a pipe:
// an engine the agent started inherits the agent's stdout, and a pipe would
// keep Wait blocked for as long as any such grandchild lives.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// bin builds (once per test process) and returns the path of cmd/<name>.
func bin(t *testing.T, name string) string {
	t.Helper()
	p, err := testbin.Path(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// baseEnv is what every process gets: enough to run, and nothing of the
// caller's MENTAT_* or router settings, so a developer's shell cannot change
// what a test means.
func baseEnv(extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LOG_LEVEL=debug"}
	return append(env, extra...)
}

// start runs argv with env; the process is stopped when the test ends
// (SIGTERM, then SIGKILL after 10 s) and its output is logged if the test
// failed.
func start(t *testing.T, name string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- %s (%s) output:\n%s", name, strings.Join(argv, " "), p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to stop and waits for it; after 10 s it kills the
// whole process group.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Errorf("%s did not stop within 10 s of SIGTERM; killing its process group", p.name)
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
}

// waitOutput waits for a line matching re and returns its submatches.
func (p *proc) waitOutput(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	eventually(p.t, p.name+" logs "+re, func() bool { m = rx.FindStringSubmatch(p.output()); return m != nil })
	return m
}

// deadline is generous: two cores are shared with other engineers'
// compiles and tests.
const deadline = 45 * time.Second

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", deadline, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// alive reports whether pid names a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself
	// contain spaces or parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}
