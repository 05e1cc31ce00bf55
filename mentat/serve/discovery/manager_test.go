package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// fakeDaemon speaks the daemon's /status and /events the way mentatd does.
type fakeDaemon struct {
	srv         *httptest.Server
	statusHits  atomic.Int64
	eventsConns atomic.Int64

	mu   sync.Mutex
	snap wire.Snapshot
	hold chan struct{} // non-nil: /status waits for it to close
	ws   *websocket.Conn
	quit chan struct{}
}

func newFakeDaemon(t *testing.T, snap wire.Snapshot) *fakeDaemon {
	d := &fakeDaemon{snap: snap, quit: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		d.statusHits.Add(1)
		d.mu.Lock()
		hold := d.hold
		b, _ := json.Marshal(d.snap)
		d.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-d.quit:
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		d.eventsConns.Add(1)
		ctx := c.CloseRead(r.Context())
		d.mu.Lock()
		data, _ := json.Marshal(d.snap)
		d.ws = c
		d.mu.Unlock()
		first, _ := json.Marshal(wire.Event{Type: wire.EventSnapshot, Seq: 1, Data: data})
		if c.Write(ctx, websocket.MessageText, first) != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-d.quit:
		}
	})
	d.srv = httptest.NewServer(mux)
	t.Cleanup(d.close)
	return d
}

func (d *fakeDaemon) addr() string { return d.srv.Listener.Addr().String() }

func (d *fakeDaemon) close() {
	select {
	case <-d.quit:
	default:
		close(d.quit)
	}
	d.srv.Close()
}

func (d *fakeDaemon) conn() *websocket.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ws
}

// send pushes n event frames, then pings: the pong proves the client has
// read every frame before it.
func (d *fakeDaemon) send(t *testing.T, n int) {
	t.Helper()
	c := d.conn()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		b, _ := json.Marshal(wire.Event{Type: wire.EventActorRunning, Seq: int64(i + 2)})
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("event write: %v", err)
		}
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testproc.Until(t, 20*time.Second, what, cond)
}

func snapshotFor(ip string) wire.Snapshot {
	return wire.Snapshot{Proto: wire.Proto, NodeID: wire.NodeID(ip), NodeIP: ip, Addrs: []string{ip},
		Peers: map[string]wire.Peer{}, Groups: map[string]wire.Group{}}
}

func startManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.FetchTimeout == 0 {
		cfg.FetchTimeout = 5 * time.Second
	}
	if cfg.Subnets == nil {
		cfg.Subnets = loopbackOnly
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Listen(); err != nil {
		t.Fatal(err)
	}
	testproc.Background(t, m.Run)
	return m
}

func view(m *Manager, addr string) (View, bool) {
	for _, v := range m.Views() {
		if v.Addr == addr {
			return v, true
		}
	}
	return View{}, false
}

func TestEventsDoorbellCoalesces(t *testing.T) {
	d := newFakeDaemon(t, snapshotFor("127.0.0.1"))
	m := startManager(t, Config{Seeds: []string{d.addr()}, PollInterval: time.Hour})

	eventually(t, "events open", func() bool { v, _ := view(m, d.addr()); return v.Events })
	d.send(t, 0) // the snapshot frame has been read and has rung the bell
	// The first poll plus one re-read for the snapshot frame.
	eventually(t, "initial reads", func() bool { return d.statusHits.Load() == 2 })

	hold := make(chan struct{})
	d.mu.Lock()
	d.hold = hold
	d.mu.Unlock()
	d.send(t, 1) // one event: an immediate re-read, though the poll interval is an hour
	eventually(t, "re-read on event", func() bool { return d.statusHits.Load() == 3 })
	// A burst while that read is in flight collapses into one more read.
	d.send(t, 200)
	d.mu.Lock()
	d.hold = nil
	d.mu.Unlock()
	close(hold)
	eventually(t, "coalesced re-read", func() bool { return d.statusHits.Load() == 4 })
	time.Sleep(200 * time.Millisecond)
	if n := d.statusHits.Load(); n != 4 {
		t.Fatalf("a burst of 200 events caused %d re-reads, want 1", n-3)
	}

	// The WebSocket reconnects after it drops.
	d.conn().Close(websocket.StatusGoingAway, "restart")
	eventually(t, "events reconnect", func() bool { return d.eventsConns.Load() >= 2 })
}

func TestPeersOfSeed(t *testing.T) {
	b := newFakeDaemon(t, snapshotFor("127.0.0.1"))
	_, bport, _ := net.SplitHostPort(b.addr())
	bp, _ := strconv.Atoi(bport)
	sa := snapshotFor("127.0.0.3")
	sa.Peers = map[string]wire.Peer{
		wire.NodeID("127.0.0.9"): {NodeIP: "127.0.0.9", LinkIP: "10.77.0.9", Addrs: []string{"10.77.0.9", "127.0.0.1"}, HTTPPort: bp, Alive: true},
		wire.NodeID("127.0.0.8"): {NodeIP: "127.0.0.8", Addrs: []string{"127.0.0.8"}, HTTPPort: 6380, Alive: false},
	}
	a := newFakeDaemon(t, sa)
	m := startManager(t, Config{Seeds: []string{a.addr()}, DiscoverPeers: true})
	// The peer is reached on its address that is on one of our subnets.
	eventually(t, "peer watched", func() bool { v, ok := view(m, b.addr()); return ok && v.Snapshot != nil })
	v, _ := view(m, b.addr())
	if v.Source != SourcePeer || v.Seed {
		t.Fatalf("peer view %+v", v)
	}
	if _, ok := view(m, "127.0.0.8:6380"); ok {
		t.Fatal("dead peer watched")
	}
	if len(m.Views()) != 2 {
		t.Fatalf("views %+v", m.Views())
	}

	// Without DISCOVER_PEERS the peer is not added.
	m2 := startManager(t, Config{Seeds: []string{a.addr()}, DiscoverPeers: false})
	eventually(t, "seed read", func() bool { v, _ := view(m2, a.addr()); return v.Snapshot != nil })
	if len(m2.Views()) != 1 {
		t.Fatalf("peers added with DISCOVER_PEERS off: %+v", m2.Views())
	}
}

func announceFor(t *testing.T, nodeIP, httpAddr string, seq int64, key string) []byte {
	b, err := wire.EncodeDatagram(wire.Announcement{Proto: wire.Proto, NodeID: wire.NodeID(nodeIP), Universe: "default",
		HTTP: httpAddr, Addrs: []string{"127.0.0.1"}, BootID: "b", Seq: seq, T: time.Now().Unix()}, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAnnouncedDaemonWatchedAndBounded(t *testing.T) {
	d := newFakeDaemon(t, snapshotFor("127.0.0.1"))
	logs := &testproc.Buffer{}
	m := startManager(t, Config{AnnounceAddr: "127.0.0.1:0", Allow: NewAllow([]string{"127.0.0.1"}), Key: []byte("k"),
		MaxAnnounced: 2, ForgetAfter: 500 * time.Millisecond, Logger: logx.New(logs, -8)})
	testproc.SendUDP(t, m.AnnounceAddr(), announceFor(t, "10.1.0.1", d.addr(), 1, "k"))
	eventually(t, "announced daemon watched", func() bool { v, ok := view(m, d.addr()); return ok && v.Snapshot != nil })
	if v, _ := view(m, d.addr()); v.Source != SourceAnnounce || v.Seed {
		t.Fatalf("view %+v", v)
	}
	// An unsigned one is refused by a keyed router.
	testproc.SendUDP(t, m.AnnounceAddr(), announceFor(t, "10.1.0.5", "127.0.0.1:1", 1, ""))
	eventually(t, "unsigned dropped", func() bool { return m.Receiver().Counts()["signature"] == 1 })

	// Two more nodes on dead ports: only one fits under MaxAnnounced=2.
	testproc.SendUDP(t, m.AnnounceAddr(), announceFor(t, "10.1.0.2", "127.0.0.1:1", 1, "k"))
	testproc.SendUDP(t, m.AnnounceAddr(), announceFor(t, "10.1.0.3", "127.0.0.1:2", 1, "k"))
	eventually(t, "accepted", func() bool { return m.Receiver().Counts()["accepted"] == 3 })
	if n := len(m.Views()); n != 2 {
		t.Fatalf("%d announced daemons watched, want the limit 2", n)
	}
	if logs.CountEvent("watch_set_full") != 1 {
		t.Fatalf("watch_set_full not logged once: %s", logs.String())
	}
	// The dead one is forgotten once quiet; the live one, still answering,
	// stays although it announces no more.
	eventually(t, "dead daemon forgotten", func() bool { return len(m.Views()) == 1 })
	time.Sleep(600 * time.Millisecond)
	if _, ok := view(m, d.addr()); !ok {
		t.Fatal("answering announced daemon forgotten")
	}
}

func TestViewStaleness(t *testing.T) {
	now := time.Now()
	v := View{Snapshot: &wire.Snapshot{}, Fetched: now.Add(-299 * time.Millisecond)}
	if !v.Fresh(now, 100*time.Millisecond) {
		t.Fatal("view within three polls is stale")
	}
	v.Fetched = now.Add(-301 * time.Millisecond)
	if v.Fresh(now, 100*time.Millisecond) {
		t.Fatal("view older than three polls is fresh")
	}
	if (&View{}).Fresh(now, time.Hour) {
		t.Fatal("view without a snapshot is fresh")
	}
}

func TestNewRejectsBadSeed(t *testing.T) {
	if _, err := New(Config{Seeds: []string{"no-port"}, PollInterval: time.Second, FetchTimeout: time.Second}); err == nil {
		t.Fatal("seed without a port accepted")
	}
	_ = fmt.Sprint()
}

// A new boot_id at the same address keeps the previous boot's snapshot
// for three poll intervals; the same boot never does.
func TestRestartKeepsPreviousBoot(t *testing.T) {
	s := snapshotFor("127.0.0.1")
	s.BootID = "b1"
	s.Groups = map[string]wire.Group{"glm": {}}
	d := newFakeDaemon(t, s)
	m := startManager(t, Config{Seeds: []string{d.addr()}, PollInterval: time.Second})
	eventually(t, "first read", func() bool { v, _ := view(m, d.addr()); return v.Snapshot != nil })
	if v, _ := view(m, d.addr()); v.Previous != nil {
		t.Fatal("previous boot set without a restart")
	}
	d.mu.Lock()
	d.snap.BootID, d.snap.Groups = "b2", map[string]wire.Group{}
	d.mu.Unlock()
	d.send(t, 1) // the doorbell: re-read now
	var v View
	eventually(t, "new boot read", func() bool { v, _ = view(m, d.addr()); return v.Snapshot != nil && v.Snapshot.BootID == "b2" })
	now := time.Now()
	prev := v.Carried(now)
	if prev == nil || prev.BootID != "b1" || len(prev.Groups) != 1 {
		t.Fatalf("previous boot not carried: %+v", v.Previous)
	}
	if v.PreviousUntil.Sub(now) > 3*time.Second || v.Carried(now.Add(3*time.Second+time.Millisecond)) != nil {
		t.Fatalf("carried beyond three poll intervals: until %s", v.PreviousUntil)
	}
}
