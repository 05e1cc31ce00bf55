package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/daemon"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFromEnv(t *testing.T) {
	ok := []struct {
		env  map[string]string
		cmd  []string
		want func(Config) bool
	}{
		{map[string]string{"MENTAT_GROUP": "glm"}, nil, func(c Config) bool {
			return c.Daemon == "127.0.0.1:6380" && len(c.Services) == 0 && c.Container != "" && c.BindCheck == 2*time.Second && c.BindWait == 600*time.Second
		}},
		{map[string]string{"MENTAT_GROUP": "glm", "MENTAT_OPENAI_API": "8000/v1", "MENTAT_MCP_API": "http://10.0.0.9:9000/mcp",
			"MENTAT_MODEL_PROVIDER": "VLLM", "MENTAT_DAEMON": "10.0.0.1", "MENTAT_CONTAINER": "c1", "MENTAT_NODE_IP": "10.0.0.1"},
			[]string{"/usr/bin/vllm", "serve"}, func(c Config) bool {
				o, m := c.Services["openai"], c.Services["mcp"]
				return o == wire.Service{Port: 8000, Path: "/v1", Provider: "vllm"} && m == wire.Service{Host: "10.0.0.9", Port: 9000, Path: "/mcp"} &&
					c.Daemon == "10.0.0.1:6380" && c.Container == "c1" && c.NodeIP == "10.0.0.1" && c.ActorName == "vllm"
			}},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_OPENAI_API": "http://0.0.0.0:8000/v1"}, nil, func(c Config) bool {
			return c.Services["openai"] == wire.Service{Port: 8000, Path: "/v1"}
		}},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_MODEL_PROVIDER": "vllm"}, nil, func(c Config) bool {
			return c.Provider == "vllm" && len(c.Services) == 0
		}},
	}
	for i, tc := range ok {
		c, err := FromEnv(envconf.Map(tc.env), tc.cmd)
		if err != nil || !tc.want(c) {
			t.Errorf("case %d: %v %+v", i, err, c)
		}
	}
	bad := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "MENTAT_GROUP is required"},
		{map[string]string{"MENTAT_GROUP": "a b"}, "MENTAT_GROUP"},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_OPENAI_API": "v1"}, "MENTAT_OPENAI_API"},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_MCP_API": "https://h:1/x"}, "MENTAT_MCP_API"},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_OPENAI_API": "70000"}, "MENTAT_OPENAI_API"},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_DAEMON": "h:x"}, "MENTAT_DAEMON"},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_NODE_IP": "h"}, "MENTAT_NODE_IP"},
		{map[string]string{"MENTAT_GROUP": "g", "MENTAT_CONTAINER": "a b"}, "MENTAT_CONTAINER"},
	}
	for _, tc := range bad {
		if _, err := FromEnv(envconf.Map(tc.env), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
}

// runDaemon runs an in-process daemon on addr ("127.0.0.1:0" for any port)
// until stop is called.
func runDaemon(t *testing.T, addr string) (d *daemon.Daemon, stop func()) {
	t.Helper()
	cfg := daemon.Defaults()
	host, port, _ := net.SplitHostPort(addr)
	cfg.HTTPHost = host
	cfg.HTTPPort, _ = strconv.Atoi(port)
	cfg.AnnouncePort = 0
	cfg.AnnounceIfaces = []string{"lo"}
	cfg.AgentTimeout = 1500 * time.Millisecond
	d, err := daemon.New(cfg, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = d.Listen()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the old daemon's port is being released
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return d, stop
}

func statusOf(t *testing.T, addr string) *wire.Snapshot {
	t.Helper()
	c := daemon.NewClient(addr, 5*time.Second)
	defer c.Close()
	resp, err := c.HTTP.Get("http://" + addr + "/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	s, err := wire.DecodeSnapshot(body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestLinkSurvivesDaemonRestart(t *testing.T) {
	d, stop := runDaemon(t, "127.0.0.1:0")
	addr := d.Addr()
	c := daemon.NewClient(addr, 2*time.Second)
	defer c.Close()
	l := newLink(c, logx.Discard(), daemon.RegisterRequest{Group: "g", Container: "c", PID: 1},
		map[string]wire.Service{"openai": {Port: 8000, Path: "/v1"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	l.setActor("a:1", daemon.ActorState{Name: "w", State: wire.ActorRunning, PID: 9})
	eventually(t, "registered with a running actor", func() bool {
		s := statusOf(t, addr)
		return s != nil && s.Groups["g"].Actors["a:1"].State == "running"
	})
	// Longer than the daemon's agent timeout: heartbeats keep it alive.
	time.Sleep(2 * time.Second)
	if s := statusOf(t, addr); !s.Groups["g"].Agents["g@c@127.0.0.1"].Alive {
		t.Fatal("agent lost despite heartbeats")
	}

	stop()
	l.setNote("openai", "bound to 127.0.0.1 only") // while the daemon is down
	d2, _ := runDaemon(t, addr)
	eventually(t, "re-registered with the new daemon, whole state", func() bool {
		s := statusOf(t, addr)
		if s == nil || s.BootID != d2.BootID() {
			return false
		}
		g := s.Groups["g"]
		return g.Actors["a:1"].State == "running" && g.Agents["g@c@127.0.0.1"].Services["openai"].Note == "bound to 127.0.0.1 only"
	})
}

func TestBindCheckNarrowThenWide(t *testing.T) {
	narrow, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := narrow.Addr().(*net.TCPAddr).Port
	notes := make(chan string, 10)
	b := &bindCheck{log: logx.Discard(), every: 20 * time.Millisecond, wait: time.Hour,
		services: map[string]wire.Service{"openai": {Port: port}, "mcp": {Host: "10.0.0.1", Port: port}},
		setNote:  func(service, note string) { notes <- service + "=" + note }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	want := func(w string) {
		t.Helper()
		select {
		case n := <-notes:
			if n != w {
				t.Fatalf("note %q, want %q", n, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no note, want %q", w)
		}
	}
	want("openai=bound to 127.0.0.1 only") // the URL-form mcp is not checked
	narrow.Close()
	wide, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		t.Skipf("cannot rebind the port wide: %v", err)
	}
	defer wide.Close()
	want("openai=")
}

func TestBindCheckNeverListened(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens on port now
	var buf syncBuffer
	b := &bindCheck{log: logx.New(&buf, slog.LevelInfo), every: 10 * time.Millisecond, wait: 50 * time.Millisecond,
		services: map[string]wire.Service{"openai": {Port: port, Path: "/v1"}},
		setNote:  func(string, string) { t.Error("note sent for a port nobody listens on") }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.run(ctx); close(done) }()
	eventually(t, "service_never_listened", func() bool { return strings.Contains(buf.String(), "event=service_never_listened") })
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	if n := strings.Count(buf.String(), "service_never_listened"); n != 1 {
		t.Fatalf("logged %d times, want once", n)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Stopping the link while a call to the daemon is in flight lets the call
// finish: a daemon that has read an abandoned call may apply it after the
// agent's final state, and an exited engine would then stay "spawning"
// (the TestCommandNotFound flake). The fake daemon holds the actor update
// until the link has been told to stop.
func TestLinkStopFinishesCallInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var aborted atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/agent/register", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"agent_id":"g@c@127.0.0.1","node_id":"n","node_ip":"127.0.0.1","boot_id":"b","heartbeat_s":60}`)
	})
	mux.HandleFunc("POST /v1/agent/actor", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		aborted.Store(r.Context().Err() != nil)
		fmt.Fprint(w, `{"ok":true}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := daemon.NewClient(srv.Listener.Addr().String(), 20*time.Second)
	defer c.Close()
	l := newLink(c, logx.Discard(), daemon.RegisterRequest{Group: "g", Container: "c", PID: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
	<-l.first

	l.setActor("a:1", daemon.ActorState{Name: "w", State: wire.ActorSpawning})
	<-entered
	cancel()
	close(release)
	<-done
	if !l.registered || aborted.Load() {
		t.Fatalf("the link abandoned its call when stopped (registered %v, aborted %v): the daemon could apply it after the final state", l.registered, aborted.Load())
	}
}
