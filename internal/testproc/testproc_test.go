package testproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sh(t *testing.T, o Options, script string) *Proc {
	t.Helper()
	return Start(t, o, "/bin/sh", "-c", script)
}

func TestOutputAndExitCode(t *testing.T) {
	p := sh(t, Options{Name: "talker"}, `echo "ready port=1234"; echo oops >&2; sleep 0.2; exit 7`)
	if m := p.WaitOutput(t, 30*time.Second, `ready port=(\d+)`); m[1] != "1234" {
		t.Fatalf("submatch %q", m)
	}
	code, ok := p.ExitCode(30 * time.Second)
	if !ok || code != 7 {
		t.Fatalf("exit code %d (exited %v), want 7", code, ok)
	}
	if !p.Exited() || !strings.Contains(p.Output(), "oops") || p.Name() != "talker" {
		t.Fatalf("exited %v, name %q, output %q", p.Exited(), p.Name(), p.Output())
	}
}

func TestEnvAndDir(t *testing.T) {
	dir := t.TempDir()
	p := sh(t, Options{Env: []string{"ONLY=this"}, Dir: dir}, `echo "env=$ONLY home=${HOME:-unset} dir=$(pwd)"`)
	if code, ok := p.ExitCode(30 * time.Second); !ok || code != 0 {
		t.Fatalf("exit %d %v", code, ok)
	}
	if want := "env=this home=unset dir=" + dir + "\n"; p.Output() != want {
		t.Fatalf("output %q, want %q", p.Output(), want)
	}
}

func TestStopEndsWithSIGTERM(t *testing.T) {
	p := Start(t, Options{}, "sleep", "300")
	if killed := p.Stop(30 * time.Second); killed {
		t.Fatal("sleep needed SIGKILL")
	}
	st, ok := p.State(0)
	if !ok || st.ExitCode() != -1 || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("state %v %v", st, ok)
	}
	if p.Stop(time.Second) {
		t.Fatal("a second Stop killed")
	}
}

// A process that ignores SIGTERM is killed with its whole group, including
// a child that inherited the ignored signal.
func TestStopKillsGroupAfterGrace(t *testing.T) {
	p := sh(t, Options{}, `trap "" TERM; sleep 300 & echo "child=$!"; wait`)
	child, _ := strconv.Atoi(p.WaitOutput(t, 30*time.Second, `child=(\d+)`)[1])
	if !Alive(child) {
		t.Fatalf("child %d not alive", child)
	}
	start := time.Now()
	if !p.Stop(300 * time.Millisecond) {
		t.Fatal("Stop did not need to kill a shell that ignores SIGTERM")
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("killed after %v, before the grace period", waited)
	}
	Until(t, 30*time.Second, "the child killed with the group", func() bool { return !Alive(child) })
}

func TestTimeoutStopsProcess(t *testing.T) {
	p := Start(t, Options{Timeout: 100 * time.Millisecond}, "sleep", "300")
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30 s after a 100 ms timeout")
	}
}

func TestSignalAndSignalGroup(t *testing.T) {
	p := sh(t, Options{}, `trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.05; done`)
	p.WaitOutput(t, 30*time.Second, `ready`)
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	p.WaitOutput(t, 30*time.Second, `got-usr1`)
	if err := p.SignalGroup(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, ok := p.ExitCode(30 * time.Second); !ok || code != -1 {
		t.Fatalf("exit %d %v after SIGKILL", code, ok)
	}
	if _, ok := Start(t, Options{}, "sleep", "300").ExitCode(10 * time.Millisecond); ok {
		t.Fatal("ExitCode of a running process says it exited")
	}
}

func TestAlive(t *testing.T) {
	p := Start(t, Options{}, "true")
	if _, ok := p.ExitCode(30 * time.Second); !ok {
		t.Fatal("true did not exit")
	}
	if Alive(p.PID()) {
		t.Fatalf("reaped pid %d alive", p.PID())
	}
	if !Alive(syscall.Getpid()) {
		t.Fatal("the test itself is not alive")
	}
}

func TestEventuallyAndUntil(t *testing.T) {
	n := 0
	Eventually(t, 30*time.Second, "third try", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	m := 0
	Until(t, 30*time.Second, "third try", func() bool { m++; return m == 3 })
	if n != 3 || m != 3 {
		t.Fatalf("tries %d %d", n, m)
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				fmt.Fprintf(&b, "level=INFO event=tick n=%d\n", i*100+j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := b.CountEvent("tick"); n != 200 {
		t.Fatalf("CountEvent(tick) = %d, want 200", n)
	}
	if n := b.CountEvent("tic"); n != 0 {
		t.Fatalf("CountEvent(tic) = %d, want 0", n)
	}
}

func TestBackgroundCancelsAtCleanup(t *testing.T) {
	stopped := make(chan struct{})
	t.Run("run", func(t *testing.T) {
		Background(t, func(ctx context.Context) error {
			<-ctx.Done()
			close(stopped)
			return nil
		})
	})
	select {
	case <-stopped:
	default:
		t.Fatal("the background run was not cancelled and waited for when its test ended")
	}
}

func TestNetHelpers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()

	pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(FreeUDPPort(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	SendUDP(t, pc.LocalAddr(), []byte("hi"))
	buf := make([]byte, 16)
	_ = pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, _, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("read %q %v", buf[:n], err)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.Error(w, "nope", http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"a":1}`)
	}))
	defer srv.Close()
	c := &http.Client{Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	var v struct{ A int }
	if err := GetJSON(c, srv.URL+"/ok", &v); err != nil || v.A != 1 {
		t.Fatalf("GetJSON: %+v %v", v, err)
	}
	if err := GetJSON(c, srv.URL+"/missing", &v); err == nil || !strings.Contains(err.Error(), "404 nope") {
		t.Fatalf("GetJSON of a 404: %v", err)
	}
}

func TestRSSKiB(t *testing.T) {
	kb, err := RSSKiB(syscall.Getpid())
	if err != nil || kb <= 0 {
		t.Fatalf("RSSKiB of the test itself: %d %v", kb, err)
	}
	if _, err := RSSKiB(-1); err == nil {
		t.Fatal("RSSKiB of no process: no error")
	}
}
