package discovery

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

var testNow = time.Unix(1787862155, 0)

func loopbackOnly() []*net.IPNet {
	_, n, _ := net.ParseCIDR("127.0.0.0/8")
	return []*net.IPNet{n}
}

func newTestReceiver(key string, logs *testproc.Buffer) *Receiver {
	return NewReceiver(ReceiverConfig{
		Universe: "prod", Key: []byte(key), Allow: NewAllow([]string{"10.100.0.", "127.0.0.1", "::1"}),
		Subnets: loopbackOnly, Now: func() time.Time { return testNow }, Logger: logx.New(logs, -8),
	})
}

func announcement(seq int64) wire.Announcement {
	return wire.Announcement{Proto: wire.Proto, NodeID: wire.NodeID("10.100.0.7"), Universe: "prod",
		HTTP: "10.100.0.7:6380", Addrs: []string{"10.100.0.7", "127.0.0.1"}, BootID: "b1", Seq: seq, T: testNow.Unix()}
}

func encode(t testing.TB, p wire.Announcement, key string) []byte {
	t.Helper()
	b, err := wire.EncodeDatagram(p, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var src = netip.MustParseAddr("10.100.0.7")

func TestAcceptOrderAndChecks(t *testing.T) {
	logs := &testproc.Buffer{}
	r := newTestReceiver("sekrit", logs)

	// A good signed announcement: watch the first advertised address on our
	// own subnets (127.0.0.1 here), with the http port.
	a, ok := r.Accept(src, encode(t, announcement(5), "sekrit"))
	if !ok || a.Addr != "127.0.0.1:6380" || a.NodeID != wire.NodeID("10.100.0.7") {
		t.Fatalf("good announcement: %+v %v", a, ok)
	}

	// Replay of the same seq, and an older one.
	for _, seq := range []int64{5, 4} {
		if _, ok := r.Accept(src, encode(t, announcement(seq), "sekrit")); ok {
			t.Fatalf("replayed seq %d accepted", seq)
		}
	}
	// A new boot starts its own sequence.
	p := announcement(1)
	p.BootID = "b2"
	if _, ok := r.Accept(src, encode(t, p, "sekrit")); !ok {
		t.Fatal("new boot_id refused")
	}

	// Foreign universe with a bad signature: dropped as universe, silently.
	p = announcement(10)
	p.Universe = "other"
	if _, ok := r.Accept(src, encode(t, p, "wrong")); ok {
		t.Fatal("foreign universe accepted")
	}
	// Missing universe means "default", which is foreign here too.
	p.Universe = ""
	if _, ok := r.Accept(src, encode(t, p, "sekrit")); ok {
		t.Fatal("default universe accepted by a prod receiver")
	}
	if c := r.Counts(); c["universe"] != 2 || c["signature"] != 0 || logs.String() != "" {
		t.Fatalf("universe drop not silent or not before signature work: %v logs=%q", c, logs.String())
	}

	// Unsigned and badly signed are refused with a key; logged once per source.
	if _, ok := r.Accept(src, encode(t, announcement(11), "")); ok {
		t.Fatal("unsigned accepted with a key set")
	}
	if _, ok := r.Accept(src, encode(t, announcement(12), "wrong")); ok {
		t.Fatal("badly signed accepted")
	}
	other := netip.MustParseAddr("127.0.0.1")
	if _, ok := r.Accept(other, encode(t, announcement(13), "wrong")); ok {
		t.Fatal("badly signed accepted")
	}
	if n := logs.CountEvent("announce_rejected"); n != 2 {
		t.Fatalf("announce_rejected logged %d times, want once per source (2): %s", n, logs.String())
	}

	// Freshness: t more than 30 s away either way.
	for _, d := range []time.Duration{31 * time.Second, -31 * time.Second} {
		p = announcement(20)
		p.T = testNow.Add(d).Unix()
		if _, ok := r.Accept(src, encode(t, p, "sekrit")); ok {
			t.Fatalf("announcement %v off accepted", d)
		}
	}
	p = announcement(21)
	p.T = testNow.Add(29 * time.Second).Unix()
	if _, ok := r.Accept(src, encode(t, p, "sekrit")); !ok {
		t.Fatal("announcement 29 s ahead refused")
	}

	// http port 0.
	p = announcement(30)
	p.HTTP = "10.100.0.7:0"
	if _, ok := r.Accept(src, encode(t, p, "sekrit")); ok {
		t.Fatal("http port 0 accepted")
	}
	// A dropped datagram does not advance the replay counter.
	if _, ok := r.Accept(src, encode(t, announcement(30), "sekrit")); !ok {
		t.Fatal("seq 30 refused after a dropped seq 30")
	}

	// Oversize.
	big := append(encode(t, announcement(40), "sekrit"), bytes.Repeat([]byte(" "), wire.MaxDatagram)...)
	if _, ok := r.Accept(src, big); ok {
		t.Fatal("oversize accepted")
	}
	c := r.Counts()
	if c["size"] != 1 || c["replay"] != 2 || c["skew"] != 2 || c["port"] != 1 || c["signature"] != 3 || c["accepted"] != 4 {
		t.Fatalf("counts %v", c)
	}
}

func TestAcceptSources(t *testing.T) {
	logs := &testproc.Buffer{}
	r := newTestReceiver("", logs)
	// Disallowed datagram source.
	if _, ok := r.Accept(netip.MustParseAddr("10.9.0.4"), encode(t, announcement(1), "")); ok {
		t.Fatal("disallowed source accepted")
	}
	// Allowed source, one disallowed advertised address.
	p := announcement(2)
	p.Addrs = append(p.Addrs, "10.200.0.1")
	if _, ok := r.Accept(src, encode(t, p, "")); ok {
		t.Fatal("disallowed advertised address accepted")
	}
	// Disallowed http host.
	p = announcement(3)
	p.HTTP = "10.200.0.1:6380"
	if _, ok := r.Accept(src, encode(t, p, "")); ok {
		t.Fatal("disallowed http host accepted")
	}
	if n := logs.CountEvent("announce_source_not_allowed"); n != 1 {
		t.Fatalf("announce_source_not_allowed logged %d times, want once: %s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `allowed=10.100.0.,127.0.0.1,::1`) || !strings.Contains(logs.String(), "source=10.9.0.4") {
		t.Fatalf("log does not name the source and the prefixes in force: %s", logs.String())
	}
	// An IPv4-mapped source reads as IPv4; no address on our subnets means
	// the datagram's source is watched.
	p = announcement(4)
	p.Addrs = []string{"10.100.0.7"}
	a, ok := r.Accept(netip.MustParseAddr("::ffff:10.100.0.7"), encode(t, p, ""))
	if !ok || a.Addr != "10.100.0.7:6380" {
		t.Fatalf("mapped source: %+v %v", a, ok)
	}
	// The legacy unsigned form is accepted without a key.
	legacy := `{"mentat_announce":1,"node_id":"n9","universe":"prod","http":"127.0.0.1:7000","addrs":["127.0.0.1"],"seq":3}`
	if a, ok := r.Accept(netip.MustParseAddr("127.0.0.1"), []byte(legacy)); !ok || a.Addr != "127.0.0.1:7000" {
		t.Fatalf("legacy: %+v %v", a, ok)
	}
	// Unsigned datagrams are not subject to the clock check.
	p = announcement(5)
	p.T = 0
	if _, ok := r.Accept(src, encode(t, p, "")); !ok {
		t.Fatal("unsigned datagram with t=0 refused")
	}
}

// TestAcceptCanonicalSignature signs a payload the way a Python daemon
// does (canonical JSON, keys in any order on the wire, non-ASCII raw or
// escaped) and checks the receiver verifies it; the wire package holds the
// page's test vector itself.
func TestAcceptCanonicalSignature(t *testing.T) {
	vec := []byte(`{"a":1,"b":[2,{"c":3,"d":4}],"universe":"kü"}`)
	if !wire.Verify([]byte("k"), vec, "ec381f4b20bc7eb6b1f18c7f15b06a5c7c60aca04b4ffcba2c1910ac6262ed39") {
		t.Fatal("wire page test vector does not verify")
	}
	r := newTestReceiver("k", &testproc.Buffer{})
	for i, p := range []string{
		`{"t":1787862155,"universe":"prod","seq":1,"node_id":"kü","http":"127.0.0.1:6380","boot_id":"b","addrs":["127.0.0.1"],"extra":{"z":1,"a":[1,2]}}`,
		`{"addrs":["127.0.0.1"],"boot_id":"b","http":"127.0.0.1:6380","node_id":"k\u00fc","seq":2,"t":1787862155,"universe":"prod"}`,
	} {
		sig, err := wire.Sign([]byte("k"), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		dg := `{"p":` + p + `,"sig":"` + sig + `"}`
		if _, ok := r.Accept(netip.MustParseAddr("127.0.0.1"), []byte(dg)); !ok {
			t.Fatalf("payload %d with a canonical signature refused: %v", i, r.Counts())
		}
	}
}

func TestReplayMemoryBounded(t *testing.T) {
	r := newTestReceiver("", &testproc.Buffer{})
	for i := 0; i < maxReplayKeys+50; i++ {
		p := announcement(1)
		p.BootID = "boot" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + time.Duration(i).String()
		r.Accept(src, encode(t, p, ""))
	}
	r.mu.Lock()
	n := len(r.replay)
	r.mu.Unlock()
	if n > maxReplayKeys {
		t.Fatalf("replay map grew to %d", n)
	}
}

func TestRejectedLogBounded(t *testing.T) {
	logs := &testproc.Buffer{}
	r := newTestReceiver("k", logs)
	b := encode(t, announcement(1), "")
	for i := 0; i < maxRejectedLogs+10; i++ {
		r.Accept(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), b)
	}
	if n := logs.CountEvent("announce_rejected"); n != maxRejectedLogs {
		t.Fatalf("announce_rejected logged %d times, want %d", n, maxRejectedLogs)
	}
	if logs.CountEvent("announce_rejected_suppressed") != 1 {
		t.Fatal("suppression not logged once")
	}
}

func FuzzAccept(f *testing.F) {
	f.Add([]byte(`{"p":{"universe":"prod","http":"127.0.0.1:6380","addrs":["127.0.0.1"],"seq":1,"t":1787862155}}`), "")
	f.Add(encode(f, announcement(3), "k"), "k")
	f.Add([]byte(`{"mentat_announce":1,"universe":"prod","http":"[::1]:6380","addrs":["::1"]}`), "")
	f.Add([]byte(`{"p":{"universe":"prod","http":"127.0.0.1:99999"}}`), "")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		r := NewReceiver(ReceiverConfig{Universe: "prod", Key: []byte(key), Allow: NewAllow([]string{"127.", "::1", "10.100.0."}),
			Subnets: loopbackOnly, Now: func() time.Time { return testNow }})
		a, ok := r.Accept(netip.MustParseAddr("127.0.0.1"), data)
		if !ok {
			return
		}
		host, port, err := net.SplitHostPort(a.Addr)
		if err != nil || port == "0" || port == "" {
			t.Fatalf("accepted unusable address %q", a.Addr)
		}
		if !r.allow.Host(host) {
			t.Fatalf("watch address %q fails the allowlist", host)
		}
		if len(data) > wire.MaxDatagram {
			t.Fatal("oversize accepted")
		}
		// The same datagram again is a replay.
		if _, again := r.Accept(netip.MustParseAddr("127.0.0.1"), data); again {
			t.Fatal("replay accepted")
		}
	})
}

func TestAllow(t *testing.T) {
	a := NewAllow([]string{"10.100.0.", " 127.0.0.1", "::1", "", "172."})
	for host, want := range map[string]bool{
		"10.100.0.5": true, "10.100.1.5": false, "127.0.0.1": true, "127.0.0.2": false,
		"::1": true, "[::1]": true, "::ffff:172.17.0.2": true, "192.168.1.1": false, "": false,
	} {
		if got := a.Host(host); got != want {
			t.Errorf("Host(%q) = %v", host, got)
		}
	}
	if a.String() != "10.100.0.,127.0.0.1,::1,172." {
		t.Fatal(a.String())
	}
	if (Allow{}).Host("127.0.0.1") {
		t.Fatal("empty allowlist allows")
	}
}
