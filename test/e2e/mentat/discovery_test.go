package e2e

import (
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// A router seeded only with daemon B finds the model on daemon A through
// B's mesh peers.
func TestMeshPeersLeadToOtherDaemons(t *testing.T) {
	// Two daemons on one machine need distinct node identities.
	a := startDaemon(t, "daemon-a", "MENTAT_NODE_IP=127.0.0.2")
	b := startDaemon(t, "daemon-b", "MENTAT_NODE_IP=127.0.0.3", "MENTAT_PEERS="+a.addr)
	startAgent(t, a.addr, &engine{group: "alpha", model: "alpha-7b"})
	startAgent(t, b.addr, &engine{group: "beta", model: "beta-1b"})

	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+b.addr)
	r.waitModels(t, "alpha-7b", "beta-1b")
	st := r.status(t)
	if da, ok := st.Daemons[a.addr]; !ok || da.Seed || !da.Connected {
		t.Fatalf("daemon A in /status.json = %+v (listed %v), want connected, not a seed; daemons %+v", da, ok, st.Daemons)
	}
	if db := st.Daemons[b.addr]; !db.Seed {
		t.Fatalf("daemon B should be the seed: %+v", st.Daemons)
	}
	if g := st.Groups["alpha"]; g.Daemon != a.addr {
		t.Fatalf("alpha comes from %q, want daemon A %s", g.Daemon, a.addr)
	}
	r.chatOK(t, "alpha-7b")

	// With peer discovery off, the seed is all the router watches.
	r2 := startRouter(t, "router-nopeers", 0, "MENTAT_DAEMONS="+b.addr, "DISCOVER_PEERS=0")
	r2.waitModels(t, "beta-1b")
	if st := r2.status(t); len(st.Daemons) != 1 {
		t.Fatalf("DISCOVER_PEERS=0 watches %v, want daemon B only", st.Daemons)
	}
}

// With MENTAT_DAEMONS set and empty, UDP announcements are the only way in:
// the daemon unicasts them to the router's announce port on 127.0.0.1.
func TestAnnouncementsAloneFindADaemon(t *testing.T) {
	udp := testproc.FreeUDPPort(t)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS=", "MENTAT_ANNOUNCE_PORT="+itoa(udp))
	if st := r.status(t); len(st.Daemons) != 0 {
		t.Fatalf("router with MENTAT_DAEMONS= watches %v before any announcement", st.Daemons)
	}
	d := startDaemon(t, "daemon", "MENTAT_ANNOUNCE_ADDR=127.0.0.1:"+itoa(udp))
	startAgent(t, d.addr, &engine{group: "alpha", model: "alpha-7b"})
	r.waitModels(t, "alpha-7b")
	if dd, ok := r.status(t).Daemons[d.addr]; !ok || dd.Seed {
		t.Fatalf("daemon %s found by announcement should be watched and not a seed: %+v", d.addr, r.status(t).Daemons)
	}
	r.chatOK(t, "alpha-7b")
}

// A keyed router refuses announcements signed with another key and takes
// those signed with its own.
func TestSecretsMustMatch(t *testing.T) {
	udp := testproc.FreeUDPPort(t)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS=", "MENTAT_ANNOUNCE_PORT="+itoa(udp), "MENTAT_SECRET=router-key")

	wrong := startDaemon(t, "daemon-wrong", "MENTAT_ANNOUNCE_ADDR=127.0.0.1:"+itoa(udp), "MENTAT_SECRET=other-key",
		"MENTAT_NODE_IP=127.0.0.2")
	startAgent(t, wrong.addr, &engine{group: "wrong", model: "wrong-1"})
	// The rejection in the router's log proves the datagrams arrived.
	r.WaitOutput(t, deadline, `announce_rejected`)

	right := startDaemon(t, "daemon-right", "MENTAT_ANNOUNCE_ADDR=127.0.0.1:"+itoa(udp), "MENTAT_SECRET= router-key\n",
		"MENTAT_NODE_IP=127.0.0.3")
	startAgent(t, right.addr, &engine{group: "right", model: "right-1"})
	r.waitModels(t, "right-1")

	// By now the wrong daemon has announced many times over.
	st := r.status(t)
	if _, ok := st.Daemons[wrong.addr]; ok || len(st.Daemons) != 1 {
		t.Fatalf("router watches %v; the daemon with another key must never be seen", st.Daemons)
	}
	if _, ok := st.Groups["wrong"]; ok {
		t.Fatalf("group of the daemon with another key reached the router: %+v", st.Groups)
	}
	if n := strings.Count(r.Output(), "announce_rejected"); n != 1 {
		t.Errorf("announce_rejected logged %d times, want once per source", n)
	}
}
