package serve

import (
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

func TestViewStalenessDropsGroups(t *testing.T) {
	e := startEngine(t, "127.0.0.1:0", "m")
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"g": group("127.0.0.1", openai(e.port(), ""), "running"),
	}))
	r := startServer(t, testConfig(d.addr()))
	r.waitGroup(t, "g", "healthy", func(g GroupStatus) bool { return g.Healthy })
	d.failing.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		doc := r.status(t)
		_, present := doc.Groups["g"]
		dm := doc.Daemons[d.addr()]
		if !present && !dm.Connected && strings.Contains(str(dm.Error), "HTTP 500") {
			if _, routed := doc.Models["m"]; routed {
				t.Fatal("model still routed from a stale view")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("view never went stale: %+v", doc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// It recovers as soon as the daemon answers again.
	d.failing.Store(false)
	r.waitGroup(t, "g", "back", func(g GroupStatus) bool { return g.Healthy })
}

func TestPeersThroughSeedOnlyDaemon(t *testing.T) {
	e := startEngine(t, "127.0.0.1:0", "pm")
	b := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"gb": group("127.0.0.1", openai(e.port(), ""), "running"),
	}))
	// The seed runs nothing and knows b only as a mesh peer.
	seed := nodeSnap("127.0.0.5", []string{"127.0.0.5"}, nil)
	seed.Peers = map[string]wire.Peer{wire.NodeID("127.0.0.1"): {NodeIP: "127.0.0.1", LinkIP: "127.0.0.1",
		Addrs: []string{"127.0.0.1"}, HTTPPort: b.port(), Alive: true}}
	a := newFakeDaemon(t, seed)
	r := startServer(t, testConfig(a.addr()))
	g := r.waitGroup(t, "gb", "healthy via a peer", func(g GroupStatus) bool { return g.Healthy })
	if g.Daemon != b.addr() {
		t.Fatalf("group daemon %q", g.Daemon)
	}
	doc := r.status(t)
	if dm, ok := doc.Daemons[b.addr()]; !ok || dm.Seed || !dm.Connected {
		t.Fatalf("peer daemon %+v", doc.Daemons)
	}
	if !doc.Daemons[a.addr()].Seed {
		t.Fatal("seed not marked")
	}

	// DISCOVER_PEERS off: the peer's group never shows.
	cfg := testConfig(a.addr())
	cfg.DiscoverPeers = false
	r2 := startServer(t, cfg)
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if doc := r2.status(t); len(doc.Daemons) != 1 || len(doc.Groups) != 0 {
			t.Fatalf("peer discovered with DISCOVER_PEERS off: %+v", doc)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAnnouncementsEndToEnd(t *testing.T) {
	e := startEngine(t, "127.0.0.1:0", "am")
	good := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"announced": group("127.0.0.1", openai(e.port(), ""), "running"),
	}))
	bad := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"forged": group("127.0.0.1", openai(e.port(), ""), "running"),
	}))
	cfg := testConfig()
	cfg.AnnounceAddr = "127.0.0.1:0"
	cfg.Secret = []byte("k")
	cfg.AllowedSources = []string{"127.0.0.1"}
	r := startServer(t, cfg)
	to := r.srv.AnnounceAddr()

	ann := func(universe, httpAddr string, addrs []string, seq int64, key string) []byte {
		b, err := wire.EncodeDatagram(wire.Announcement{Proto: wire.Proto, NodeID: wire.NodeID("127.0.0.1"), Universe: universe,
			HTTP: httpAddr, Addrs: addrs, BootID: "b", Seq: seq, T: time.Now().Unix()}, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	lo := []string{"127.0.0.1"}
	testproc.SendUDP(t, to, ann("elsewhere", bad.addr(), lo, 1, "k"))                   // foreign universe
	testproc.SendUDP(t, to, ann("default", bad.addr(), lo, 2, ""))                      // unsigned
	testproc.SendUDP(t, to, ann("default", bad.addr(), lo, 3, "not-the-key"))           // badly signed
	testproc.SendUDP(t, to, ann("default", bad.addr(), []string{"10.200.0.1"}, 4, "k")) // disallowed address
	testproc.SendUDP(t, to, ann("default", bad.addr(), []string{"10.200.0.2"}, 5, "k"))
	testproc.SendUDP(t, to, ann("default", good.addr(), lo, 6, "k"))
	r.waitGroup(t, "announced", "healthy via an announcement", func(g GroupStatus) bool { return g.Healthy })

	counts := r.srv.Discovery().Receiver().Counts()
	if counts["universe"] != 1 || counts["signature"] != 2 || counts["source"] != 2 || counts["accepted"] != 1 {
		t.Fatalf("counts %v", counts)
	}
	if _, ok := r.status(t).Groups["forged"]; ok {
		t.Fatal("a dropped announcement's daemon was watched")
	}
	if n := r.logs.CountEvent("announce_source_not_allowed"); n != 1 || !strings.Contains(r.logs.String(), "allowed=127.0.0.1") {
		t.Fatalf("announce_source_not_allowed logged %d times:\n%s", n, r.logs.String())
	}
	if n := r.logs.CountEvent("announce_rejected"); n != 1 { // once per source; both came from 127.0.0.1
		t.Fatalf("announce_rejected logged %d times", n)
	}
	if strings.Contains(r.logs.String(), "elsewhere") {
		t.Fatal("the foreign universe was logged")
	}
	if dm := r.status(t).Daemons[good.addr()]; dm.Seed || !dm.Connected {
		t.Fatalf("announced daemon %+v", dm)
	}
}

func TestAnnounceListenerOff(t *testing.T) {
	cfg := testConfig()
	r := startServer(t, cfg)
	if r.srv.AnnounceAddr() != nil {
		t.Fatal("listener on with MENTAT_ANNOUNCE_PORT=0")
	}
}
