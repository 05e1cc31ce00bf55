package main

// Process-level tests: the real mentatd binary, built once in TestMain, run
// as daemon and agent on 127.0.0.1 with fast intervals. The engine is this
// test binary re-executed as a tiny HTTP server (helperMain).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

func TestMain(m *testing.M) {
	if os.Getenv("MENTATD_TEST_HELPER") == "serve" {
		helperMain()
		return
	}
	testproc.Main(m, testproc.Suite{Build: []string{"mentatd"}})
}

// helperMain is the fake engine: HTTP on HELPER_ADDR; on SIGTERM it says so
// and exits 3, so a test can tell the signal reached it.
func helperMain() {
	ln, err := net.Listen("tcp", os.Getenv("HELPER_ADDR"))
	if err != nil {
		fmt.Println("helper listen:", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	}()
	fmt.Println("helper listening", ln.Addr())
	<-sigs
	fmt.Println("helper got SIGTERM")
	os.Exit(3)
}

// start runs the mentatd binary with args and the test's environment plus
// env (testproc.Start).
func start(t *testing.T, env []string, args ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Options{Name: "mentatd " + strings.Join(args, " "), Env: append(os.Environ(), env...)},
		append([]string{testproc.Bin(t, "mentatd")}, args...)...)
}

// wait waits for p to exit and returns its status as a shell reports it
// (128+n for death by signal n).
func wait(t *testing.T, p *testproc.Proc) int {
	t.Helper()
	st, ok := p.State(30 * time.Second)
	if !ok {
		t.Fatalf("process did not exit; output:\n%s", p.Output())
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testproc.Until(t, 30*time.Second, what, cond)
}

// daemonEnv is a fast daemon (its agent timeout generous enough that a
// loaded machine does not make agents miss heartbeats) on 127.0.0.1 that never looks at the real NICs
// beyond lo and never broadcasts.
func daemonEnv(port int, extra ...string) []string {
	return append([]string{"MENTAT_HTTP_HOST=127.0.0.1", "MENTAT_HTTP_PORT=" + strconv.Itoa(port),
		"MENTAT_ANNOUNCE_IFACES=lo", "MENTAT_ANNOUNCE_PORT=0", "MENTAT_ANNOUNCE_INTERVAL_S=0.2",
		"MENTAT_PEER_POLL_S=0.2", "MENTAT_AGENT_TIMEOUT_S=3", "MENTAT_SECRET=", "MENTAT_SECRET_FILE=",
		"MENTAT_PEERS=", "MENTAT_ANNOUNCE_ADDR=", "MENTAT_NODE_IP="}, extra...)
}

func startDaemon(t *testing.T, extra ...string) (*testproc.Proc, string) {
	p := start(t, daemonEnv(0, extra...), "daemon")
	addr := p.WaitOutput(t, 30*time.Second, `event=http_listening addr=(\S+)`)[1]
	return p, addr
}

func status(t *testing.T, addr string) *wire.Snapshot {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	s, err := wire.DecodeSnapshot(body)
	if err != nil {
		t.Fatalf("status: %v: %s", err, body)
	}
	return s
}

func agentEnv(daemon string, extra ...string) []string {
	return append([]string{"MENTAT_DAEMON=" + daemon, "MENTAT_CONTAINER=c1", "MENTAT_BIND_CHECK_S=0.1",
		"MENTAT_NODE_IP=", "MENTAT_OPENAI_API=", "MENTAT_MCP_API=", "MENTAT_MODEL_PROVIDER="}, extra...)
}

func helperEnv(addr string) []string {
	return []string{"MENTATD_TEST_HELPER=serve", "HELPER_ADDR=" + addr}
}

// actorStates follows /events and records every state the group's actors
// take, in order.
func actorStates(t *testing.T, addr, group string) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var states []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for first := true; ; first = false {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var ev wire.Event
			if json.Unmarshal(b, &ev) != nil || (first && ev.Type != "snapshot") {
				mu.Lock()
				states = append(states, "BAD FRAME "+string(b))
				mu.Unlock()
				return
			}
			for _, op := range ev.Patch {
				var st []string
				switch {
				case len(op.At) == 2 && op.At[0] == "groups" && op.At[1] == group && op.Value != nil:
					var g wire.Group
					_ = json.Unmarshal(op.Value, &g)
					for _, a := range g.Actors {
						st = append(st, a.State)
					}
				case len(op.At) == 4 && op.At[1] == group && op.At[2] == "actors":
					var a wire.Actor
					_ = json.Unmarshal(op.Value, &a)
					st = append(st, a.State)
				}
				mu.Lock()
				for _, s := range st {
					if len(states) == 0 || states[len(states)-1] != s {
						states = append(states, s)
					}
				}
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); c.CloseNow(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), states...)
	}
}

func TestActorLifecycleSignalsAndNarrowBind(t *testing.T) {
	_, daddr := startDaemon(t)
	states := actorStates(t, daddr, "g1")
	port := testproc.FreePort(t)
	exe, _ := os.Executable()
	a := start(t, append(agentEnv(daddr, "MENTAT_GROUP=g1", fmt.Sprintf("MENTAT_OPENAI_API=%d/v1", port),
		"MENTAT_MODEL_PROVIDER=VLLM"), helperEnv(fmt.Sprintf("127.0.0.1:%d", port))...),
		"agent", "--", exe)

	var s *wire.Snapshot
	eventually(t, "actor running with the narrow-bind note", func() bool {
		s = status(t, daddr)
		if s == nil {
			return false
		}
		ag := s.Groups["g1"].Agents["g1@c1@127.0.0.1"]
		return len(s.Groups["g1"].Actors) == 1 && ag.Services["openai"].Note == "bound to 127.0.0.1 only"
	})
	ag := s.Groups["g1"].Agents["g1@c1@127.0.0.1"]
	if svc := ag.Services["openai"]; !ag.Alive || svc.Port != port || svc.Path != "/v1" || svc.Host != "" || svc.Provider != "vllm" {
		t.Fatalf("agent %+v", ag)
	}
	for _, act := range s.Groups["g1"].Actors {
		if act.State != "running" || act.PID == 0 || act.Name != filepath.Base(exe) {
			t.Fatalf("actor %+v", act)
		}
	}
	a.WaitOutput(t, 30*time.Second, `event=service_bind_narrow service=openai port=`+strconv.Itoa(port))

	a.Signal(syscall.SIGTERM)
	if code := wait(t, a); code != 3 {
		t.Fatalf("agent exit status %d, want the engine's 3", code)
	}
	if !strings.Contains(a.Output(), "helper got SIGTERM") {
		t.Fatal("SIGTERM did not reach the engine")
	}
	eventually(t, "spawning, running, dead on /events", func() bool {
		return strings.Join(states(), ",") == "spawning,running,dead"
	})
	eventually(t, "agent deregistered after a requested stop", func() bool {
		s := status(t, daddr)
		return s != nil && len(s.Groups) == 0
	})
}

func TestKilledEngineIsDeadThenAgentAgesOut(t *testing.T) {
	_, daddr := startDaemon(t, "MENTAT_AGENT_TIMEOUT_S=0.6")
	exe, _ := os.Executable()
	a := start(t, append(agentEnv(daddr, "MENTAT_GROUP=g2", "MENTAT_OPENAI_API=http://10.9.9.9:8000/v1"),
		helperEnv("127.0.0.1:0")...), "agent", "--", exe)
	var pid int
	eventually(t, "actor running", func() bool {
		s := status(t, daddr)
		if s == nil {
			return false
		}
		for _, act := range s.Groups["g2"].Actors {
			if act.State == "running" {
				pid = act.PID
			}
		}
		return pid != 0
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, a); code != 137 {
		t.Fatalf("agent exit status %d, want 137", code)
	}
	s := status(t, daddr)
	var act wire.Actor
	for _, v := range s.Groups["g2"].Actors {
		act = v
	}
	if act.State != "dead" || act.Reason != "killed by signal 9 (killed)" {
		t.Fatalf("actor after SIGKILL: %+v", act)
	}
	if u := s.Groups["g2"].Agents["g2@c1@127.0.0.1"].Services["openai"]; u.Host != "10.9.9.9" || u.Port != 8000 {
		t.Fatalf("URL-form service %+v", u)
	}
	// The agent is gone without deregistering: lost after the timeout,
	// removed after four.
	eventually(t, "agent marked alive:false", func() bool {
		ag, ok := status(t, daddr).Groups["g2"].Agents["g2@c1@127.0.0.1"]
		return ok && !ag.Alive
	})
	eventually(t, "agent removed", func() bool { return len(status(t, daddr).Groups) == 0 })
}

func TestAgentSurvivesDaemonRestart(t *testing.T) {
	port := testproc.FreePort(t)
	d1 := start(t, daemonEnv(port), "daemon")
	daddr := d1.WaitOutput(t, 30*time.Second, `event=http_listening addr=(\S+)`)[1]
	a := start(t, agentEnv(daddr, "MENTAT_GROUP=g3", "MENTAT_MCP_API=9000/mcp"), "agent")
	eventually(t, "registered", func() bool {
		s := status(t, daddr)
		return s != nil && s.Groups["g3"].Agents["g3@c1@127.0.0.1"].Alive
	})
	d1.Signal(syscall.SIGTERM)
	if code := wait(t, d1); code != 0 {
		t.Fatalf("daemon exit status %d on SIGTERM", code)
	}
	d2 := start(t, daemonEnv(port), "daemon")
	d2.WaitOutput(t, 30*time.Second, `event=http_listening`)
	eventually(t, "re-registered with the new daemon", func() bool {
		s := status(t, daddr)
		return s != nil && s.Groups["g3"].Agents["g3@c1@127.0.0.1"].Alive
	})
	a.WaitOutput(t, 30*time.Second, `event=agent_reregistered`)
	a.Signal(syscall.SIGINT)
	if code := wait(t, a); code != 0 {
		t.Fatalf("agent without a command exit status %d, want 0", code)
	}
	eventually(t, "deregistered", func() bool { return len(status(t, daddr).Groups) == 0 })
}

func TestAgentRefusesBadConfig(t *testing.T) {
	a := start(t, agentEnv("127.0.0.1:1", "MENTAT_GROUP=g", "MENTAT_OPENAI_API=https://h:1/v1"), "agent")
	if code := wait(t, a); code != 2 || !strings.Contains(a.Output(), "MENTAT_OPENAI_API") {
		t.Fatalf("status %d output %q", code, a.Output())
	}
	d := start(t, daemonEnv(0, "MENTAT_SECRET_FILE="+filepath.Join(t.TempDir(), "missing")), "daemon")
	if code := wait(t, d); code != 2 || !strings.Contains(d.Output(), "MENTAT_SECRET_FILE") {
		t.Fatalf("daemon with an unreadable secret file: status %d output %q", code, d.Output())
	}
	// `mentatd serve` is the router: its boot rules apply (an unreadable
	// MENTAT_SECRET_FILE stops it with the reason).
	s := start(t, []string{"MENTAT_SECRET_FILE=" + filepath.Join(t.TempDir(), "missing"), "SERVE_PORT=0", "MENTAT_ANNOUNCE_PORT=0"}, "serve")
	if code := wait(t, s); code != 1 || !strings.Contains(s.Output(), "MENTAT_SECRET_FILE") {
		t.Fatalf("mentatd serve with an unreadable secret file: %d %q", code, s.Output())
	}
	s = start(t, nil, "serve", "extra")
	if code := wait(t, s); code != 2 {
		t.Fatalf("mentatd serve with an argument: %d %q", code, s.Output())
	}
}

func TestSignedAnnouncementsAndMesh(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(" k3y \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, aAddr := startDaemon(t, "MENTAT_NODE_IP=127.0.0.2", "MENTAT_UNIVERSE=u7", "MENTAT_SECRET_FILE="+keyFile,
		"MENTAT_ANNOUNCE_ADDR="+pc.LocalAddr().String())
	buf := make([]byte, 2048)
	_ = pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, _, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	dg, err := wire.DecodeDatagram(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	if !dg.VerifySig([]byte("k3y")) || dg.Payload.Universe != "u7" || dg.Payload.HTTP != aAddr ||
		dg.Payload.NodeID != wire.NodeID("127.0.0.2") {
		t.Fatalf("announcement %s", buf[:n])
	}

	_, bAddr := startDaemon(t, "MENTAT_NODE_IP=127.0.0.3", "MENTAT_PEERS="+aAddr)
	eventually(t, "B reports A under peers", func() bool {
		s := status(t, bAddr)
		p, ok := s.Peers[wire.NodeID("127.0.0.2")]
		return ok && p.Alive && p.NodeIP == "127.0.0.2" && p.LinkIP == "127.0.0.1" && strconv.Itoa(p.HTTPPort) == aAddr[strings.LastIndex(aAddr, ":")+1:]
	})
}

func TestCommandNotFound(t *testing.T) {
	_, daddr := startDaemon(t)
	a := start(t, agentEnv(daddr, "MENTAT_GROUP=g4"), "agent", "--", "/nonexistent/engine")
	if code := wait(t, a); code != 127 {
		t.Fatalf("exit status %d, want 127", code)
	}
	var act wire.Actor
	for _, v := range status(t, daddr).Groups["g4"].Actors {
		act = v
	}
	if act.State != "dead" || !strings.HasPrefix(act.Reason, "start failed: ") || act.Name != "engine" {
		t.Fatalf("actor %+v", act)
	}
}

// An agent killed outright takes its engine with it (found by the chaos
// soak: the orphaned engine kept the port, and the agent started in its
// place could not serve).
func TestKilledAgentStopsItsEngine(t *testing.T) {
	_, daddr := startDaemon(t)
	exe, _ := os.Executable()
	a := start(t, append(agentEnv(daddr, "MENTAT_GROUP=g3"), helperEnv("127.0.0.1:0")...), "agent", "--", exe)
	var pid int
	eventually(t, "actor running", func() bool {
		s := status(t, daddr)
		if s == nil {
			return false
		}
		for _, act := range s.Groups["g3"].Actors {
			if act.State == "running" {
				pid = act.PID
			}
		}
		return pid != 0
	})
	// Should the engine outlive its agent after all, the test still
	// leaves nothing behind (checking first that the pid is still this
	// test's engine, not a process that took the number since).
	t.Cleanup(func() {
		if env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil && bytes.Contains(env, []byte("MENTAT_GROUP=g3\x00")) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := syscall.Kill(a.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, a)
	eventually(t, "the engine gone after its agent was killed", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		// Gone, or a zombie waiting for init to reap it.
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	// It was told to stop (SIGTERM), not left to be killed.
	eventually(t, "the engine told SIGTERM", func() bool { return strings.Contains(a.Output(), "helper got SIGTERM") })
}
