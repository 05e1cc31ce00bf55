package docs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/doccmd"
	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// binaries are what the README's tours and the manuals run from bin/.
var binaries = []string{"mentatd", "mentatd-serve", "enginesim", "mortred-supervisor", "mortred-gateway", "mortred-server", "mortredctl"}

// checkout is a directory that looks like a checkout after `make setup`
// and `make build`: the repository's files (symlinked, so `go run ./…`
// works), bin/ with the binaries the tests built, a copy of conf/ (the
// tours write logs beside it), and a .deps/ of its own whose ONNX Runtime
// and models point at the installed ones.
func checkout(t *testing.T) string {
	t.Helper()
	root, err := testbin.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch e.Name() {
		case "bin", "conf", ".deps", ".git":
			continue
		}
		must(t, os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())))
	}
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	for _, b := range binaries {
		must(t, os.Symlink(testproc.Bin(t, b), filepath.Join(dir, "bin", b)))
	}
	must(t, exec.Command("cp", "-r", filepath.Join(root, "conf"), filepath.Join(dir, "conf")).Run())
	must(t, os.MkdirAll(filepath.Join(dir, ".deps"), 0o755))
	for _, sub := range []string{"onnxruntime", "models"} {
		installed, err := filepath.EvalSymlinks(filepath.Join(root, ".deps", sub))
		if err != nil {
			t.Fatalf(".deps/%s: %v (run `make setup`)", sub, err)
		}
		must(t, os.Symlink(installed, filepath.Join(dir, ".deps", sub)))
	}
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// netns makes a network namespace with only its loopback up, so the
// documents' fixed ports (6380, 8080, 8787, …) are free and nothing the
// tour starts can reach or disturb anything outside. At cleanup every
// process left in it gets SIGTERM, then SIGKILL, and the namespace goes.
func netns(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("fdoc-%d-%d", os.Getpid(), nsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s (the docs tests need root, as CI has)", ns, err, out)
	}
	t.Cleanup(func() {
		stopAll(t, ns)
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up in %s: %v: %s", ns, err, out)
	}
	return ns
}

var nsSeq atomic.Int64

// removeStaleNamespaces deletes the namespaces of an earlier run that was
// killed before its cleanup ran (fdoc-<pid>-<n> whose pid is gone), with
// whatever still runs in them.
func removeStaleNamespaces() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "fdoc-") {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(strings.TrimPrefix(f[0], "fdoc-"), "-")[0])
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // a run still going
		}
		if pids, err := exec.Command("ip", "netns", "pids", f[0]).Output(); err == nil {
			for _, p := range strings.Fields(string(pids)) {
				if n, err := strconv.Atoi(p); err == nil {
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// stopAll ends every process in ns: SIGTERM (the supervisor then stops its
// children), SIGKILL for what is left after 20 s.
func stopAll(t *testing.T, ns string) {
	pids := func() []int {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		var ps []int
		for _, f := range strings.Fields(string(out)) {
			if p, err := strconv.Atoi(f); err == nil {
				ps = append(ps, p)
			}
		}
		return ps
	}
	for _, p := range pids() {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && len(pids()) > 0; time.Sleep(100 * time.Millisecond) {
	}
	if left := pids(); len(left) > 0 {
		t.Errorf("processes in %s still alive 20 s after SIGTERM (killed): %v", ns, left)
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// shell is one bash inside the namespace, fed the document's commands one
// by one as a reader types them, so `export` and `. ./mortred.env` carry
// over. Each command's output goes to its own file; bash's stdout carries
// only "__doccmd__ N STATUS" lines.
type shell struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	marks chan string
	out   string // directory of the output files
	n     int
	bg    []background
}

type background struct {
	c   doccmd.Command
	pid int
	out string
}

func newShell(t *testing.T, ns, dir string) *shell {
	t.Helper()
	s := &shell{t: t, marks: make(chan string, 16), out: t.TempDir()}
	s.cmd = exec.Command("ip", "netns", "exec", ns, "bash", "--noprofile", "--norc")
	s.cmd.Dir = dir
	s.cmd.Env = readerEnv(dir)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.marks <- sc.Text()
		}
		close(s.marks)
	}()
	t.Cleanup(func() {
		s.in.Close()
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
	})
	return s
}

// readerEnv is a newcomer's environment: the test's PATH and Go settings,
// HOME in the checkout, and no MENTAT_* or MORTRED* variable, so only what
// the document sets counts.
func readerEnv(dir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MENTAT") || strings.HasPrefix(k, "MORTRED") || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	if gocache, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE").Output(); err == nil {
		f := strings.Fields(string(gocache))
		if len(f) == 2 {
			env = append(env, "GOCACHE="+f[0], "GOMODCACHE="+f[1])
		}
	}
	return append(env, "HOME="+dir)
}

// send runs one line in the shell and returns its exit status and output.
func (s *shell) send(line string, timeout time.Duration) (int, string) {
	s.n++
	out := filepath.Join(s.out, strconv.Itoa(s.n)+".out")
	fmt.Fprintf(s.in, "{ %s\n} >%s 2>&1 </dev/null; echo \"__doccmd__ %d $?\"\n", line, out, s.n)
	rc := s.wait(s.n, timeout, line)
	data, _ := os.ReadFile(out)
	return rc, string(data)
}

// start runs a background command ("cmd &") and returns its pid.
func (s *shell) start(c doccmd.Command) background {
	s.n++
	out := filepath.Join(s.out, strconv.Itoa(s.n)+".out")
	line := strings.TrimSpace(strings.TrimSuffix(c.Text, "&"))
	fmt.Fprintf(s.in, "{ %s\n} >%s 2>&1 </dev/null &\necho \"__doccmd__ %d $!\"\n", line, out, s.n)
	b := background{c: c, pid: s.wait(s.n, 10*time.Second, line), out: out}
	s.bg = append(s.bg, b)
	return b
}

func (s *shell) wait(n int, timeout time.Duration, line string) int {
	prefix := fmt.Sprintf("__doccmd__ %d ", n)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-s.marks:
			if !ok {
				s.t.Fatalf("the shell exited while running %q", line)
			}
			if v, found := strings.CutPrefix(m, prefix); found {
				rc, err := strconv.Atoi(v)
				if err != nil {
					s.t.Fatalf("bad mark %q", m)
				}
				return rc
			}
		case <-timer.C:
			s.t.Fatalf("%q still running after %v:\n%s", line, timeout, s.backgroundOutput())
		}
	}
}

// backgroundOutput is the end of every background command's output, for
// a failure message.
func (s *shell) backgroundOutput() string {
	var b strings.Builder
	for _, bg := range s.bg {
		data, _ := os.ReadFile(bg.out)
		fmt.Fprintf(&b, "--- %s (pid %d):\n%s\n", bg.c.Text, bg.pid, testproc.Tail(string(data), 3000))
	}
	return b.String()
}

var (
	portRe  = regexp.MustCompile(`:(\d{2,5})\b`)
	spaceRe = regexp.MustCompile(`\s+`)
)

// expectation is what a command's comment says it prints: the text after
// "→ " (spaces compared loosely, a table's alignment is not the point).
func expectation(comment string) string {
	_, want, ok := strings.Cut(comment, "→ ")
	if !ok {
		return ""
	}
	return spaceRe.ReplaceAllString(strings.TrimSpace(want), " ")
}

// run runs a document's commands in order, as written, and checks each:
//
//   - a background command ("… &") must stay up, and every ":PORT" its
//     comment names must accept connections;
//   - any other command must exit 0 and print what its "→ …" comment
//     says. Right after a server was started a reader waits and tries
//     again, so a command is repeated (every 500 ms, for up to patience)
//     until it does; one that never does fails the test.
func (s *shell) run(doc string, cmds []doccmd.Command, patience time.Duration) {
	t := s.t
	for _, c := range cmds {
		where := fmt.Sprintf("%s:%d: %s", doc, c.Line, c.Text)
		if c.Background {
			b := s.start(c)
			for _, m := range portRe.FindAllStringSubmatch(c.Comment, -1) {
				s.until(where, patience, func() (bool, string) {
					if rc, _ := s.send(fmt.Sprintf("kill -0 %d", b.pid), 10*time.Second); rc != 0 {
						data, _ := os.ReadFile(b.out)
						t.Fatalf("%s\nexited before listening on :%s; its output:\n%s", where, m[1], data)
					}
					rc, out := s.send("echo >/dev/tcp/127.0.0.1/"+m[1], 10*time.Second)
					return rc == 0, "nothing listens on :" + m[1] + ": " + out
				})
			}
			t.Logf("%s  (started, pid %d)", where, b.pid)
			continue
		}
		want := expectation(c.Comment)
		var last string
		s.until(where, patience, func() (bool, string) {
			rc, out := s.send(c.Text, patience)
			last = out
			if rc != 0 {
				return false, fmt.Sprintf("exit status %d; output:\n%s", rc, testproc.Tail(out, 4000))
			}
			if want != "" && !strings.Contains(spaceRe.ReplaceAllString(out, " "), want) {
				return false, fmt.Sprintf("output lacks %q:\n%s", want, testproc.Tail(out, 4000))
			}
			return true, ""
		})
		t.Logf("%s\n%s", where, testproc.Tail(last, 600))
	}
}

// until repeats try every 500 ms until it succeeds or patience runs out.
func (s *shell) until(where string, patience time.Duration, try func() (bool, string)) {
	end := time.Now().Add(patience)
	for {
		ok, why := try()
		if ok {
			return
		}
		if time.Now().After(end) {
			s.t.Fatalf("%s\ndid not work as written within %v: %s\n%s", where, patience, why, s.backgroundOutput())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
