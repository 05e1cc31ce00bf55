package serve

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// fakeDaemon serves /status and /events like mentatd.
type fakeDaemon struct {
	srv     *httptest.Server
	failing atomic.Bool
	mu      sync.Mutex
	snap    wire.Snapshot
	quit    chan struct{}
}

func newFakeDaemon(t *testing.T, snap wire.Snapshot) *fakeDaemon {
	d := &fakeDaemon{snap: snap, quit: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		if d.failing.Load() {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		d.mu.Lock()
		b, _ := json.Marshal(d.snap)
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := c.CloseRead(r.Context())
		first, _ := json.Marshal(wire.Event{Type: wire.EventSnapshot, Seq: 1, Data: json.RawMessage(`{}`)})
		if c.Write(ctx, websocket.MessageText, first) != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-d.quit:
		}
	})
	d.srv = httptest.NewServer(mux)
	t.Cleanup(func() { close(d.quit); d.srv.Close() })
	return d
}

func (d *fakeDaemon) addr() string { return d.srv.Listener.Addr().String() }

func (d *fakeDaemon) port() int {
	_, p, _ := net.SplitHostPort(d.addr())
	n, _ := strconv.Atoi(p)
	return n
}

// Engine behaviours.
const (
	engineOK = iota
	engineHang
	engineDirtyReuse // half an answer, then a dropped connection, on reused connections
)

// fakeEngine answers GET /v1/models like vLLM behind uvicorn, which closes
// idle keep-alive connections after a few seconds (here one).
type fakeEngine struct {
	ln      net.Listener
	srv     *http.Server
	models  []string
	mode    atomic.Int32
	hits    atomic.Int64
	release chan struct{}
	mu      sync.Mutex
	seen    map[string]bool
}

func startEngine(t *testing.T, addr string, models ...string) *fakeEngine {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serveEngine(t, ln, models...)
}

func serveEngine(t *testing.T, ln net.Listener, models ...string) *fakeEngine {
	e := &fakeEngine{ln: ln, models: models, release: make(chan struct{}), seen: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		e.mu.Lock()
		reused := e.seen[r.RemoteAddr]
		e.seen[r.RemoteAddr] = true
		e.mu.Unlock()
		switch e.mode.Load() {
		case engineHang:
			select {
			case <-e.release:
			case <-r.Context().Done():
			}
			return
		case engineDirtyReuse:
			if reused {
				if c, buf, err := http.NewResponseController(w).Hijack(); err == nil {
					buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"object\":")
					buf.Flush()
					c.Close()
				}
				return
			}
		}
		var data []string
		for _, m := range e.models {
			data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","created":1700000000,"owned_by":"vllm","root":"/models/%s","parent":null,"max_model_len":4096,"permission":[{"id":"p"}]}`, m, m))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[%s]}`, strings.Join(data, ","))
	})
	e.srv = &http.Server{Handler: mux, IdleTimeout: time.Second}
	go e.srv.Serve(ln)
	t.Cleanup(e.stop)
	return e
}

func (e *fakeEngine) port() int { return e.ln.Addr().(*net.TCPAddr).Port }

func (e *fakeEngine) stop() {
	select {
	case <-e.release:
	default:
		close(e.release)
	}
	e.srv.Close()
}

func openai(port int, note string) map[string]wire.Service {
	return map[string]wire.Service{
		wire.ServiceOpenAI: {Port: port, Path: "/v1", Provider: "vllm", Note: note},
		wire.ServiceMCP:    {Port: 9000, Path: "/mcp"},
	}
}

func group(nodeIP string, svcs map[string]wire.Service, states ...string) wire.Group {
	g := wire.Group{Agents: map[string]wire.Agent{}, Actors: map[string]wire.Actor{}}
	if svcs != nil {
		g.Agents["rank0"] = wire.Agent{NodeIP: nodeIP, Alive: true, Services: svcs}
	}
	for i, s := range states {
		g.Actors["a:"+strconv.Itoa(i)] = wire.Actor{Name: "w" + strconv.Itoa(i), State: s}
	}
	return g
}

func nodeSnap(ip string, addrs []string, groups map[string]wire.Group) wire.Snapshot {
	if groups == nil {
		groups = map[string]wire.Group{}
	}
	return wire.Snapshot{Proto: wire.Proto, NodeID: wire.NodeID(ip), NodeIP: ip, Addrs: addrs,
		Peers: map[string]wire.Peer{}, Groups: groups}
}

func loopbackSubnets() []*net.IPNet { return subnets("127.0.0.0/8") }

// testConfig is a router configuration with short intervals on loopback.
func testConfig(daemons ...string) Config {
	c := DefaultConfig()
	c.HTTPAddr, c.AnnounceAddr = "127.0.0.1:0", ""
	c.Daemons = daemons
	c.AllowedSources = []string{"127."}
	c.PollInterval = 100 * time.Millisecond
	c.ProbeInterval = 100 * time.Millisecond
	c.ProbeTimeout = 2 * time.Second
	c.ProbeFresh = 5 * time.Second
	c.ProbePromote = 300 * time.Millisecond
	c.Subnets = loopbackSubnets
	c.Drain = 10 * time.Millisecond // a test's stop need not wait for a balancer
	return c
}

type running struct {
	srv  *Server
	base string
	logs *testproc.Buffer
}

func startServer(t *testing.T, cfg Config) *running {
	t.Helper()
	logs := &testproc.Buffer{}
	s, err := New(cfg, logx.New(logs, -8))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	testproc.Background(t, s.Run)
	return &running{srv: s, base: "http://" + s.Addr().String(), logs: logs}
}

func (r *running) get(t *testing.T, path string, into any) {
	t.Helper()
	resp, err := http.Get(r.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

func (r *running) status(t *testing.T) StatusDoc {
	var doc StatusDoc
	r.get(t, "/status.json", &doc)
	return doc
}

// waitGroup polls /status.json until cond holds for the named group.
func (r *running) waitGroup(t *testing.T, name, what string, cond func(g GroupStatus) bool) GroupStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, ok := r.status(t).Groups[name]
		if ok && cond(g) {
			return g
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(g)
			t.Fatalf("group %s: timed out waiting for %s; last %s (present=%v)\nlogs:\n%s", name, what, b, ok, r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func whyNot(g GroupStatus) string {
	if g.WhyNot == nil {
		return ""
	}
	return *g.WhyNot
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
