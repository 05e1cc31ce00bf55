package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loOnly stands in for the machine's interfaces so that tests never depend
// on its real NICs.
func loOnly() ([]Iface, error) {
	return []Iface{{Name: "lo", Index: 1, Up: true, Loopback: true,
		Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}}}, nil
}

func testConfig() Config {
	c := Defaults()
	c.HTTPHost, c.HTTPPort = "127.0.0.1", 0
	c.AnnouncePort = 0
	c.AnnounceInterval = 100 * time.Millisecond
	c.PeerPoll = 100 * time.Millisecond
	c.AgentTimeout = 10 * time.Second
	return c
}

// start runs a daemon until the test ends.
func start(t *testing.T, cfg Config) *Daemon {
	t.Helper()
	d, err := New(cfg, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	d.ifaces = loOnly
	if err := d.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return d
}

func post(t *testing.T, d *Daemon, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post("http://"+d.Addr()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: answer is not JSON: %q", path, data)
	}
	return resp.StatusCode, out
}

func status(t *testing.T, addr, query string) *wire.Snapshot {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/status" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	s, err := wire.DecodeSnapshot(data)
	if err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return s
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const regBody = `{"group":"glm","container":"c1","pid":42,
 "services":{"openai":{"port":8002,"path":"/v1","provider":"VLLM"},"mcp":{"host":"10.0.0.9","port":9000,"path":"/mcp"}},
 "actors":{"a:1":{"name":"w0","state":"spawning"}}}`

func TestStatusAndAgentAPI(t *testing.T) {
	d := start(t, testConfig())
	s := status(t, d.Addr(), "")
	if s.Proto != "0.99" || s.NodeIP != "127.0.0.1" || s.NodeID != wire.NodeID("127.0.0.1") || len(s.Addrs) != 1 || s.BootID != d.BootID() {
		t.Fatalf("snapshot header = %+v", s)
	}
	code, out := post(t, d, PathRegister, regBody)
	if code != 200 || out["agent_id"] != "glm@c1@127.0.0.1" || out["boot_id"] != d.BootID() {
		t.Fatalf("register: %d %v", code, out)
	}
	s = status(t, d.Addr(), "")
	ag := s.Groups["glm"].Agents["glm@c1@127.0.0.1"]
	if !ag.Alive || ag.PID != 42 || ag.Services["openai"].Provider != "vllm" || !ag.Services["openai"].PortForm() ||
		ag.Services["mcp"].Host != "10.0.0.9" || s.Groups["glm"].Actors["a:1"].State != "spawning" {
		t.Fatalf("group = %+v", s.Groups["glm"])
	}
	seq := s.Seq

	for _, c := range []struct{ path, body string }{
		{PathActor, `{"agent_id":"glm@c1@127.0.0.1","actor_id":"a:1","name":"w0","state":"running","pid":77}`},
		{PathNote, `{"agent_id":"glm@c1@127.0.0.1","service":"openai","note":"bound to 127.0.0.1 only"}`},
		{PathHeartbeat, `{"agent_id":"glm@c1@127.0.0.1"}`},
	} {
		if code, out := post(t, d, c.path, c.body); code != 200 {
			t.Fatalf("%s: %d %v", c.path, code, out)
		}
	}
	s = status(t, d.Addr(), "?group=glm")
	if a := s.Groups["glm"].Actors["a:1"]; a.State != "running" || a.PID != 77 {
		t.Fatalf("actor = %+v", a)
	}
	if n := s.Groups["glm"].Agents["glm@c1@127.0.0.1"].Services["openai"].Note; n != "bound to 127.0.0.1 only" {
		t.Fatalf("note = %q", n)
	}
	if s.Seq != seq+2 {
		t.Fatalf("seq = %d, want %d (two changes; a heartbeat is not one)", s.Seq, seq+2)
	}
	if got := status(t, d.Addr(), "?group=other"); len(got.Groups) != 0 {
		t.Fatalf("?group=other shows %v", got.Groups)
	}

	if code, _ := post(t, d, PathDeregister, `{"agent_id":"glm@c1@127.0.0.1"}`); code != 200 {
		t.Fatal("deregister failed")
	}
	if got := status(t, d.Addr(), ""); len(got.Groups) != 0 {
		t.Fatalf("groups after deregister: %v", got.Groups)
	}
	if code, out := post(t, d, PathHeartbeat, `{"agent_id":"glm@c1@127.0.0.1"}`); code != 404 || !strings.Contains(out["error"].(string), "register again") {
		t.Fatalf("heartbeat of unknown agent: %d %v", code, out)
	}
}

func TestAgentAPIRejectsBadInput(t *testing.T) {
	d := start(t, testConfig())
	before := status(t, d.Addr(), "").Seq
	cases := []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"no group", PathRegister, `{"container":"c","pid":1}`, 400, "group is required"},
		{"bad group", PathRegister, `{"group":"a b","container":"c","pid":1}`, 400, "not allowed"},
		{"unknown field", PathRegister, `{"group":"g","container":"c","pid":1,"extra":1}`, 400, "unknown field"},
		{"bad port", PathRegister, `{"group":"g","container":"c","services":{"openai":{"port":70000}}}`, 400, "out of range"},
		{"bad path", PathRegister, `{"group":"g","container":"c","services":{"openai":{"port":80,"path":"v1"}}}`, 400, "path"},
		{"bad state", PathRegister, `{"group":"g","container":"c","actors":{"a":{"state":"zombie"}}}`, 400, "want spawning"},
		{"bad node ip", PathRegister, `{"group":"g","container":"c","node_ip":"nope"}`, 400, "node_ip"},
		{"trailing data", PathRegister, `{"group":"g","container":"c"} {}`, 400, "after the JSON"},
		{"not json", PathRegister, `hello`, 400, "JSON"},
		{"too big", PathRegister, `{"group":"` + strings.Repeat("g", MaxBodyBytes) + `"}`, 413, "over"},
		{"control char in note", PathNote, `{"agent_id":"x","service":"openai","note":"a\u0001"}`, 400, "printable"},
		{"unknown agent actor", PathActor, `{"agent_id":"x","actor_id":"a","state":"running"}`, 404, "register again"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(t, d, c.path, c.body)
			if code != c.code || !strings.Contains(out["error"].(string), c.want) {
				t.Fatalf("%d %v, want %d with %q", code, out, c.code, c.want)
			}
		})
	}
	if s := status(t, d.Addr(), ""); len(s.Groups) != 0 || s.Seq != before {
		t.Fatalf("rejected requests changed state: seq %d groups %v", s.Seq, s.Groups)
	}
	// An actor id belongs to one agent of a group.
	post(t, d, PathRegister, `{"group":"g","container":"c1","actors":{"a:1":{"state":"running"}}}`)
	if code, _ := post(t, d, PathRegister, `{"group":"g","container":"c2","actors":{"a:1":{"state":"running"}}}`); code != 409 {
		t.Fatalf("duplicate actor id: %d, want 409", code)
	}
	if code, _ := post(t, d, PathNote, `{"agent_id":"g@c1@127.0.0.1","service":"openai","note":""}`); code != 409 {
		t.Fatalf("note on an unannounced service: %d, want 409", code)
	}
}

func TestHeartbeatTimeoutMarksLostThenRemoves(t *testing.T) {
	cfg := testConfig()
	cfg.AgentTimeout = 300 * time.Millisecond
	d := start(t, cfg)
	post(t, d, PathRegister, regBody)
	eventually(t, "agent lost", func() bool {
		g := status(t, d.Addr(), "").Groups["glm"]
		return len(g.Agents) == 1 && !g.Agents["glm@c1@127.0.0.1"].Alive
	})
	g := status(t, d.Addr(), "").Groups["glm"]
	if a := g.Actors["a:1"]; a.State != "dead" || !strings.Contains(a.Reason, "agent lost") {
		t.Fatalf("actor of a lost agent = %+v", a)
	}
	if code, _ := post(t, d, PathHeartbeat, `{"agent_id":"glm@c1@127.0.0.1"}`); code != 404 {
		t.Fatalf("heartbeat of a lost agent: %d, want 404 (register again)", code)
	}
	eventually(t, "agent removed", func() bool { return len(status(t, d.Addr(), "").Groups) == 0 })
}

func TestEventsSnapshotThenPatches(t *testing.T) {
	d := start(t, testConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+d.Addr()+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	read := func() wire.Event {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ev wire.Event
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	first := read()
	if first.Type != "snapshot" {
		t.Fatalf("first frame %+v", first)
	}
	snap, err := wire.DecodeSnapshot(first.Data)
	if err != nil || snap.NodeID != wire.NodeID("127.0.0.1") || snap.Seq != first.Seq {
		t.Fatalf("snapshot frame data: %v %+v", err, snap)
	}
	post(t, d, PathRegister, regBody)
	ev := read()
	if ev.Type != "agent_register" || ev.Seq != first.Seq+1 || ev.Node != snap.NodeID || len(ev.Patch) != 1 ||
		strings.Join(ev.Patch[0].At, "/") != "groups/glm" || len(ev.Patch[0].Value) == 0 {
		t.Fatalf("register event %+v", ev)
	}
	post(t, d, PathActor, `{"agent_id":"glm@c1@127.0.0.1","actor_id":"a:1","name":"w0","state":"running","pid":5}`)
	ev = read()
	var a wire.Actor
	_ = json.Unmarshal(ev.Patch[0].Value, &a)
	if ev.Type != "actor_running" || strings.Join(ev.Patch[0].At, "/") != "groups/glm/actors/a:1" || a.State != "running" {
		t.Fatalf("actor event %+v", ev)
	}
	post(t, d, PathDeregister, `{"agent_id":"glm@c1@127.0.0.1"}`)
	ev = read()
	if ev.Type != "agent_dead" || ev.Patch[0].Value != nil || strings.Join(ev.Patch[0].At, "/") != "groups/glm" {
		t.Fatalf("deregister event %+v", ev)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

func TestEventsPingWhenIdle(t *testing.T) {
	cfg := testConfig()
	cfg.PingIdle = 50 * time.Millisecond
	d := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pinged := make(chan struct{}, 1)
	c, _, err := websocket.Dial(ctx, "ws://"+d.Addr()+"/events", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			select {
			case pinged <- struct{}{}:
			default:
			}
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err != nil { // the snapshot
		t.Fatal(err)
	}
	readCtx := c.CloseRead(ctx)
	select {
	case <-pinged:
	case <-readCtx.Done():
		t.Fatal("connection closed before a ping")
	}
}

func TestHubDropsSlowConsumer(t *testing.T) {
	h := newHub(4)
	slow, fast := h.subscribe(), h.subscribe()
	for i := range 10 {
		h.publish([]byte{byte(i)})
		<-fast.C
	}
	select {
	case <-slow.Done:
	default:
		t.Fatal("slow consumer not dropped")
	}
	select {
	case <-fast.Done:
		t.Fatal("fast consumer dropped")
	default:
	}
	if h.count() != 1 || h.dropped.Load() != 1 {
		t.Fatalf("count %d dropped %d", h.count(), h.dropped.Load())
	}
	h.unsubscribe(fast)
	h.unsubscribe(slow) // safe to repeat
}

func TestAnnouncementsSignedToUnicastAddr(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	cfg := testConfig()
	cfg.AnnounceAddrs = []string{pc.LocalAddr().String()}
	cfg.Secret = []byte("s3cret")
	cfg.Universe = "u1"
	d := start(t, cfg)
	var last int64
	buf := make([]byte, 2048)
	for i := range 2 {
		_ = pc.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		dg, err := wire.DecodeDatagram(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		if !dg.VerifySig([]byte("s3cret")) || dg.VerifySig([]byte("other")) {
			t.Fatal("signature does not verify with the secret")
		}
		p := dg.Payload
		if p.Universe != "u1" || p.NodeID != wire.NodeID("127.0.0.1") || p.HTTP != d.Addr() || p.BootID != d.BootID() ||
			len(p.Addrs) != 1 || p.Addrs[0] != "127.0.0.1" || time.Since(time.Unix(p.T, 0)).Abs() > time.Minute {
			t.Fatalf("payload %+v", p)
		}
		if p.Seq <= last {
			t.Fatalf("announcement %d: seq %d not above %d", i, p.Seq, last)
		}
		last = p.Seq
	}
}

func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	key := filepath.Join(dir, "key")
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	_ = os.WriteFile(key, []byte("  k1\n"), 0o600)
	c, err := FromEnv(envconf.Map(nil))
	if err != nil || c.HTTPPort != 6380 || c.HTTPHost != "0.0.0.0" || c.AnnounceInterval != 5*time.Second ||
		c.AgentTimeout != 15*time.Second || c.Universe != "default" || c.Secret != nil {
		t.Fatalf("defaults: %v %+v", err, c)
	}
	if _, err := FromEnv(envconf.Map(map[string]string{"MENTAT_SECRET_FILE": empty})); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty secret file: %v", err)
	}
	if _, err := FromEnv(envconf.Map(map[string]string{"MENTAT_SECRET_FILE": filepath.Join(dir, "missing")})); err == nil {
		t.Fatal("missing secret file accepted")
	}
	c, err = FromEnv(envconf.Map(map[string]string{"MENTAT_SECRET_FILE": key, "MENTAT_SECRET": "ignored",
		"MENTAT_ANNOUNCE_ADDR": "127.0.0.1, [::1]:7000,h", "MENTAT_PEERS": "10.0.0.2", "MENTAT_AGENT_TIMEOUT_S": "0.5"}))
	if err != nil || !bytes.Equal(c.Secret, []byte("k1")) || strings.Join(c.AnnounceAddrs, ",") != "127.0.0.1:6382,[::1]:7000,h:6382" ||
		c.Peers[0] != "10.0.0.2:6380" || c.AgentTimeout != 500*time.Millisecond {
		t.Fatalf("%v %+v", err, c)
	}
	if _, err := FromEnv(envconf.Map(map[string]string{"MENTAT_NODE_IP": "x"})); err == nil {
		t.Fatal("bad MENTAT_NODE_IP accepted")
	}
	if _, err := FromEnv(envconf.Map(map[string]string{"MENTAT_ANNOUNCE_IFACES": "eth["})); err == nil {
		t.Fatal("bad glob accepted")
	}
}

func TestMeshLearnsPeersTransitively(t *testing.T) {
	cfgC := testConfig()
	cfgC.NodeIP = "127.0.0.3"
	c := start(t, cfgC)
	cfgA := testConfig()
	cfgA.NodeIP = "127.0.0.2"
	cfgA.Peers = []string{c.Addr()}
	a := start(t, cfgA)
	cfgB := testConfig()
	cfgB.NodeIP = "127.0.0.4"
	cfgB.Peers = []string{a.Addr(), "127.0.0.1:1"} // and one that never answers
	b := start(t, cfgB)

	idA, idC := wire.NodeID("127.0.0.2"), wire.NodeID("127.0.0.3")
	eventually(t, "B reports A and C", func() bool {
		p := status(t, b.Addr(), "").Peers
		return p[idA].Alive && p[idC].Alive
	})
	p := status(t, b.Addr(), "").Peers
	_, portA, _ := net.SplitHostPort(a.Addr())
	if pa := p[idA]; pa.NodeIP != "127.0.0.2" || pa.LinkIP != "127.0.0.1" || len(pa.Addrs) != 1 || pa.Stale ||
		pa.HTTPPort == 0 || portA != itoa(pa.HTTPPort) {
		t.Fatalf("peer A = %+v", pa)
	}
	if len(p) != 2 {
		t.Fatalf("peers = %v (self or the dead seed listed?)", p)
	}
	if _, self := status(t, a.Addr(), "").Peers[idA]; self {
		t.Fatal("A lists itself")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A selected interface's subnet broadcast address gets the announcement.
// The interface is a stand-in on 127.0.0.0/8 so the datagram never leaves
// the machine.
func TestAnnouncementBroadcast(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	cfg := testConfig()
	cfg.AnnouncePort = pc.LocalAddr().(*net.UDPAddr).Port
	cfg.AnnounceIfaces = []string{"fake0"}
	d, err := New(cfg, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	d.ifaces = func() ([]Iface, error) {
		return []Iface{{Name: "fake0", Index: 7, Up: true, Broadcast: true,
			Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}}}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	_ = pc.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 2048)
	n, _, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no broadcast announcement to 127.255.255.255: %v", err)
	}
	dg, err := wire.DecodeDatagram(buf[:n])
	if err != nil || dg.Signed() || dg.Payload.Universe != "default" {
		t.Fatalf("%v %s", err, buf[:n])
	}
}
