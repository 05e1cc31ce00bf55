package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/bench/soak/record"
)

// sleeper starts `sleep 30` with extra environment entries and files,
// killed and reaped when the test ends, whatever happened.
func sleeper(t *testing.T, env []string, files ...*os.File) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reap(cmd) }) // a second reap only gets errors
	return cmd
}

func reap(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func fixed(pid int) func() int { return func() int { return pid } }

// metrics serves a fake exposition, refusing a wrong bearer token.
func metrics(token string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 42\ngo_threads 7\n")
	}))
}

// mute accepts TCP connections (the kernel does, into the backlog) but
// never answers, like the socket of a stopped process.
func mute(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st, ok := status(pid); ok && st.state == want {
			return
		}
	}
	t.Fatalf("pid %d never reached state %s", pid, want)
}

func TestRead(t *testing.T) {
	srv := metrics("sekrit")
	defer srv.Close()
	c := sleeper(t, nil)
	pid := c.Process.Pid

	s, ok := Read(Target{Name: "sleep", PID: fixed(pid), MetricsURL: srv.URL, MetricsToken: "sekrit"})
	if !ok {
		t.Fatal("Read of a live child returned false")
	}
	if s.Proc != "sleep" || s.PID != pid || s.At.IsZero() {
		t.Errorf("identity: %+v", s)
	}
	if s.RSS <= 0 || s.FDs < 3 || s.Threads < 1 {
		t.Errorf("RSS %d FDs %d Threads %d: want all positive (FDs ≥ 3)", s.RSS, s.FDs, s.Threads)
	}
	if s.Conns != 0 {
		t.Errorf("sleep holds no socket, got Conns %d", s.Conns)
	}
	if s.Goroutines != 42 {
		t.Errorf("Goroutines %d, want 42 from the metrics", s.Goroutines)
	}

	if s, _ := Read(Target{Name: "sleep", PID: fixed(pid)}); s.Goroutines != -1 {
		t.Errorf("no URL: Goroutines %d, want -1", s.Goroutines)
	}
	if s, _ := Read(Target{Name: "sleep", PID: fixed(pid), MetricsURL: srv.URL, MetricsToken: "wrong"}); s.Goroutines != -1 {
		t.Errorf("refused metrics: Goroutines %d, want -1", s.Goroutines)
	}
	if _, ok := Read(Target{Name: "down", PID: fixed(0)}); ok {
		t.Error("PID 0 read as running")
	}
}

func TestReadConns(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := sleeper(t, nil, f)

	s, ok := Read(Target{Name: "sock", PID: fixed(c.Process.Pid)})
	if !ok || s.Conns != 1 || s.FDs < 4 {
		t.Errorf("child with an inherited socket: ok %v Conns %d FDs %d, want Conns 1, FDs ≥ 4", ok, s.Conns, s.FDs)
	}
	if s, ok := Read(Target{Name: "self", PID: fixed(os.Getpid())}); !ok || s.Conns < 1 {
		t.Errorf("own process with a listener: ok %v Conns %d", ok, s.Conns)
	}
}

func TestReadGoneAndZombie(t *testing.T) {
	gone := sleeper(t, nil)
	reap(gone)
	if s, ok := Read(Target{Name: "gone", PID: fixed(gone.Process.Pid)}); ok {
		t.Errorf("reaped child read as running: %+v", s)
	}

	z := sleeper(t, nil)
	_ = z.Process.Kill()
	waitState(t, z.Process.Pid, "Z")
	if s, ok := Read(Target{Name: "zombie", PID: fixed(z.Process.Pid)}); ok {
		t.Errorf("zombie read as running: %+v", s)
	}
}

func TestReadStopped(t *testing.T) {
	l := mute(t)
	defer l.Close()
	c := sleeper(t, nil)
	pid := c.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "T")

	start := time.Now()
	s, ok := Read(Target{Name: "stopped", PID: fixed(pid), MetricsURL: "http://" + l.Addr().String() + "/metrics"})
	if d := time.Since(start); d > time.Second {
		t.Errorf("reading a stopped process took %v", d)
	}
	if !ok || s.RSS <= 0 || s.Threads < 1 || s.Goroutines != -1 {
		t.Errorf("stopped: ok %v %+v, want /proc figures and Goroutines -1", ok, s)
	}
}

func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := metrics("")
	defer srv.Close()
	l := mute(t) // a live process whose endpoint hangs: must not slow the rest
	defer l.Close()
	a, b := sleeper(t, nil), sleeper(t, nil)
	targets := []Target{
		{Name: "a", PID: fixed(a.Process.Pid), MetricsURL: srv.URL},
		{Name: "b", PID: fixed(b.Process.Pid)},
		{Name: "hung", PID: fixed(os.Getpid()), MetricsURL: "http://" + l.Addr().String()},
		{Name: "down", PID: fixed(0)},
	}

	var rec record.Recorder
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Run(ctx, &rec, 100*time.Millisecond, func() []Target { return targets })
		close(done)
	}()
	time.Sleep(350 * time.Millisecond)
	cancel()
	stopped := time.Now()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if d := time.Since(stopped); d > 500*time.Millisecond {
		t.Errorf("Run took %v to return after cancel", d)
	}

	_, _, samples := rec.Snapshot()
	n := map[string]int{}
	for _, s := range samples {
		n[s.Proc]++
		if s.Proc == "a" && s.Goroutines != 42 {
			t.Errorf("a: Goroutines %d, want 42", s.Goroutines)
		}
	}
	if n["a"] < 3 || n["b"] < 3 {
		t.Errorf("samples per target %v, want ≥ 3 for a and b", n)
	}
	if n["hung"] != 0 || n["down"] != 0 {
		t.Errorf("samples per target %v: the hung reading was cut by ctx and down is not running", n)
	}
}

func TestOrphans(t *testing.T) {
	marker := fmt.Sprintf("SOAK_RUN=test%d-%d", os.Getpid(), time.Now().UnixNano())
	marked := sleeper(t, []string{marker})
	sleeper(t, nil)
	sleeper(t, []string{marker + "x"}) // same prefix is not the mark
	sleeper(t, []string{"OTHER=" + marker})

	ps, err := Orphans(marker, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].PID != marked.Process.Pid || !strings.HasPrefix(ps[0].Cmd, "sleep 30") {
		t.Fatalf("Orphans = %+v, want only pid %d running sleep 30", ps, marked.Process.Pid)
	}
	if ps, _ := Orphans(marker, marked.Process.Pid); len(ps) != 0 {
		t.Errorf("excluded pid still found: %+v", ps)
	}

	_ = marked.Process.Kill()
	waitState(t, marked.Process.Pid, "Z")
	if ps, _ := Orphans(marker); len(ps) != 0 {
		t.Errorf("zombie found as orphan: %+v", ps)
	}
	reap(marked)
	if ps, _ := Orphans(marker); len(ps) != 0 {
		t.Errorf("reaped child found as orphan: %+v", ps)
	}
}
