package supervisor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"go.uber.org/goleak"
)

// The test binary doubles as the child process (go-plugin's helperProcess
// pattern): SUPERVISOR_TEST_HELPER selects what it does.
func TestMain(m *testing.M) {
	if mode := os.Getenv("SUPERVISOR_TEST_HELPER"); mode != "" {
		helperMain(mode)
		return
	}
	goleak.VerifyTestMain(m)
}

func helperMain(mode string) {
	fmt.Println("helper", mode, "starting")
	switch mode {
	case "crash":
		fmt.Fprintln(os.Stderr, "helper: crashing on purpose")
		os.Exit(3)
	case "serve":
		l, err := net.Listen("tcp", os.Getenv("HELPER_ADDR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("token-in-env:", os.Getenv("MORTRED_AUTH_TOKEN") != "")
		go func() {
			_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
		}()
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		fmt.Println("helper: got SIGTERM, exiting")
		os.Exit(0)
	case "hang": // never gets ready
		time.Sleep(time.Hour)
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		// A grandchild in the same process group must not be orphaned.
		gc := exec.Command("sleep", "300")
		_ = gc.Start()
		fmt.Println("grandchild", gc.Process.Pid)
		time.Sleep(time.Hour)
	}
}

func helperSpec(t *testing.T, mode string, extraEnv ...string) Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Spec{
		Name: mode, Path: exe, Args: []string{"-test.run=^$"},
		Env:       append([]string{"SUPERVISOR_TEST_HELPER=" + mode, "PATH=" + os.Getenv("PATH")}, extraEnv...),
		StopGrace: 500 * time.Millisecond, StartTimeout: 20 * time.Second,
	}
}

func runChild(t *testing.T, spec Spec) (*Child, context.CancelFunc) {
	t.Helper()
	c := NewChild(spec, NewRingLog(100, "", 0), logx.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	t.Cleanup(func() { cancel(); <-c.done })
	return c, cancel
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestStartReadyStop(t *testing.T) {
	addr := freeAddr(t)
	spec := helperSpec(t, "serve", "HELPER_ADDR="+addr, "MORTRED_AUTH_TOKEN=secret")
	spec.ReadyURL = "http://" + addr + "/ready"
	c, _ := runChild(t, spec)
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil { // repeated start is a no-op
		t.Fatal(err)
	}
	waitFor(t, "running and ready", 20*time.Second, func() bool { s := c.Status(); return s.State == StateRunning && s.Ready })
	if s := c.Status(); s.PID == 0 || s.StartedAtMS == 0 {
		t.Fatalf("status: %+v", s)
	}
	for _, a := range []string{spec.Path} {
		if strings.Contains(a, "secret") {
			t.Fatal("token on the command line")
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if s := c.Status(); s.State != StateStopped || s.PID != 0 || s.Ready {
		t.Fatalf("after stop: %+v", s)
	}
	lines, _, _ := c.Log().Page(0, 100)
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "token-in-env: true") || !strings.Contains(joined, "got SIGTERM") {
		t.Fatalf("log:\n%s", joined)
	}
}

func TestCrashBackoffThenFailed(t *testing.T) {
	spec := helperSpec(t, "crash")
	c, _ := runChild(t, spec)
	start := time.Now()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sawBackoff := false
	waitFor(t, "failed after the restart limit", 60*time.Second, func() bool {
		s := c.Status()
		sawBackoff = sawBackoff || s.State == StateBackoff
		return s.State == StateFailed
	})
	s := c.Status()
	if !sawBackoff || s.RestartCount != maxRestarts || s.LastExitStatus != "exit status 3" || !strings.Contains(s.Error, "(last: exit status 3): helper: crashing on purpose; giving up") {
		t.Fatalf("status: %+v (saw backoff %v)", s, sawBackoff)
	}
	// 0.5+1+2+4+8 s of backoff at least.
	if el := time.Since(start); el < 15*time.Second {
		t.Fatalf("gave up after %v: backoff not applied", el)
	}
	// A failed child starts again on request.
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "restart count grows after a manual start", 10*time.Second, func() bool { return c.Status().State != StateFailed || c.Status().RestartCount > maxRestarts })
}

func TestStartTimeoutIsTheNote(t *testing.T) {
	spec := helperSpec(t, "hang")
	spec.ReadyURL = "http://127.0.0.1:1/ready" // nothing listens there
	spec.StartTimeout = time.Second
	c, _ := runChild(t, spec)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "backoff after the start timeout", 30*time.Second, func() bool { return c.Status().State == StateBackoff })
	if s := c.Status(); !strings.HasPrefix(s.Error, "exited (killed by signal terminated): not ready within 1s, so the supervisor killed it; restarting in ") {
		t.Fatalf("status: %+v", s)
	}
}

func TestKillAfterGraceTakesTheGroup(t *testing.T) {
	c, _ := runChild(t, helperSpec(t, "ignore-term"))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var gpid int
	waitFor(t, "grandchild pid in the log", 20*time.Second, func() bool {
		lines, _, _ := c.Log().Page(0, 100)
		for _, l := range lines {
			if strings.HasPrefix(l, "grandchild ") {
				gpid, _ = strconv.Atoi(strings.TrimPrefix(l, "grandchild "))
			}
		}
		return gpid > 0
	})
	begin := time.Now()
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Since(begin) < 400*time.Millisecond {
		t.Fatal("stopped before the grace period: SIGTERM was not ignored?")
	}
	waitFor(t, "grandchild gone", 5*time.Second, func() bool { return syscall.Kill(gpid, 0) != nil })
	if s := c.Status(); !strings.Contains(s.LastExitStatus, "killed") {
		t.Fatalf("exit: %+v", s)
	}
}

func TestRunEndStopsChild(t *testing.T) {
	addr := freeAddr(t)
	c, cancel := runChild(t, helperSpec(t, "serve", "HELPER_ADDR="+addr))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pid", 10*time.Second, func() bool { return c.Status().PID > 0 })
	pid := c.Status().PID
	cancel()
	<-c.done
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatal("child still alive after the supervisor loop ended")
	}
}

func TestRingLogPaging(t *testing.T) {
	dir := t.TempDir()
	l := NewRingLog(3, dir+"/x.log", 20)
	for i := 0; i < 5; i++ {
		l.Append("line" + strconv.Itoa(i))
	}
	lines, first, total := l.Page(0, 10)
	if total != 5 || first != 2 || strings.Join(lines, ",") != "line2,line3,line4" {
		t.Fatalf("%v %d %d", lines, first, total)
	}
	lines, first, _ = l.Page(3, 1)
	if first != 3 || len(lines) != 1 || lines[0] != "line3" {
		t.Fatalf("%v %d", lines, first)
	}
	// Past the end: no lines, as an empty list (the API writes [], not null).
	if lines, _, _ := l.Page(99, 10); lines == nil || len(lines) != 0 {
		t.Fatalf("%#v", lines)
	}
	l.Close()
	if _, err := os.Stat(dir + "/x.log.1"); err != nil {
		t.Fatal("log not rotated:", err)
	}
}
