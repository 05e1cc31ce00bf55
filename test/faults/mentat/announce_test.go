package mentat

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

const floodSecret = "flood-test-secret"

// hostile returns the i-th datagram of the flood: malformed, oversized,
// from another universe, badly signed, unsigned, stale, replayed, or
// advertising addresses outside ALLOWED_SOURCES. None of them may change
// the router's watch set.
func hostile(rng *rand.Rand, i int) []byte {
	now := time.Now().Unix()
	ann := wire.Announcement{Proto: "0.99", NodeID: fmt.Sprintf("6e%04x", i%512), Universe: "default",
		HTTP: "127.0.0.1:" + strconv.Itoa(20000+i%1000), Addrs: []string{"127.0.0.1"}, BootID: "flood", Seq: int64(i), T: now}
	signed := func(a wire.Announcement, key string) []byte {
		b, err := wire.EncodeDatagram(a, []byte(key))
		if err != nil {
			panic(err)
		}
		return b
	}
	switch i % 12 {
	case 0: // random bytes
		b := make([]byte, 1+rng.IntN(1400))
		for j := range b {
			b[j] = byte(rng.UintN(256))
		}
		return b
	case 1: // oversized
		return []byte(`{"p":{"http":"127.0.0.1:6380","x":"` + strings.Repeat("x", 1500+rng.IntN(3000)) + `"}}`)
	case 2: // truncated
		b := signed(ann, floodSecret)
		return b[:rng.IntN(len(b))]
	case 3: // well-formed JSON, wrong shape
		shapes := []string{`null`, `[]`, `{}`, `{"p":[1]}`, `{"p":{}}`, `{"p":{"http":""}}`, `{"mentat_announce":null}`,
			`{"p":{"http":"127.0.0.1:6380"},"sig":""}`, `{"p":"x"}`, `"p"`, `{"p":{"http":1}}`, `{"p":{"seq":"x","http":"a:1"}}`}
		return []byte(shapes[rng.IntN(len(shapes))])
	case 4: // another universe, validly signed with its own key
		a := ann
		a.Universe = "elsewhere"
		return signed(a, "elsewhere-key")
	case 5: // another universe, signed with ours
		a := ann
		a.Universe = "elsewhere"
		return signed(a, floodSecret)
	case 6: // wrong key
		return signed(ann, "not-the-secret")
	case 7: // unsigned, while the router holds a key
		return signed(ann, "")
	case 8: // a forged signature
		b := signed(ann, floodSecret)
		var env map[string]json.RawMessage
		_ = json.Unmarshal(b, &env)
		env["sig"] = json.RawMessage(`"` + strings.Repeat("ab", 32) + `"`)
		out, _ := json.Marshal(env)
		return out
	case 9: // validly signed, but an hour old
		a := ann
		a.T = now - 3600
		return signed(a, floodSecret)
	case 10: // validly signed, advertising an address outside ALLOWED_SOURCES
		a := ann
		a.Addrs = []string{"127.0.0.1", "203.0.113." + strconv.Itoa(i%250)}
		return signed(a, floodSecret)
	default: // validly signed, http port 0
		a := ann
		a.HTTP = "127.0.0.1:0"
		return signed(a, floodSecret)
	}
}

var announceEvent = regexp.MustCompile(`event=(announce_\w+)`)

// TestAnnouncementFlood: 20,000 hostile datagrams at the router's UDP port
// in under ten seconds. Routing must not change (the same models, the same
// watched daemons, requests served throughout), the log must stay a
// handful of announce_* lines, and a genuine signed announcement must still
// be taken afterwards.
func TestAnnouncementFlood(t *testing.T) {
	t.Parallel()
	const total = 20000
	d := startDaemon(t, testproc.FreePort(t), "MENTAT_SECRET="+floodSecret)
	startAgent(t, d.addr, engineOpts{group: "alpha", model: "alpha-7b", port: testproc.FreePort(t)})
	udpPort := testproc.FreeUDPPort(t)
	r := startRouter(t, d.addr, "MENTAT_ANNOUNCE_PORT="+strconv.Itoa(udpPort), "MENTAT_SECRET="+floodSecret)
	r.waitModels(t, "alpha-7b")

	conn, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(udpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// Requests keep flowing during the flood.
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		n := 0
		for ctx.Err() == nil && n < 500 {
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			rep, err := post(rctx, r.base, "alpha-7b", 2)
			rcancel()
			if ctx.Err() != nil {
				break
			}
			if err != nil || rep.code != 200 {
				served <- fmt.Errorf("request %d during the flood: %v %d %s", n, err, rep.code, rep.body)
				return
			}
			n++
		}
		served <- nil
	}()

	rng := rand.New(rand.NewPCG(13, 13))
	start := time.Now()
	sent := 0
	for i := 0; i < total && time.Since(start) < 10*time.Second; i++ {
		if _, err := conn.Write(hostile(rng, i)); err == nil {
			sent++
		}
		if i%500 == 499 {
			time.Sleep(time.Millisecond) // let the receiver breathe; loopback drops what overflows anyway
		}
	}
	t.Logf("sent %d hostile datagrams in %s", sent, time.Since(start).Round(time.Millisecond))
	if sent < total/2 {
		t.Fatalf("only %d of %d datagrams sent within 10 s", sent, total)
	}
	// Wait until the router has read what the socket buffer held: its
	// own probes keep answering, and the announce log has had time to
	// appear.
	testproc.Eventually(t, 30*time.Second, "router rejected the flood", func() error {
		if !strings.Contains(r.Output(), "event=announce_rejected") {
			return fmt.Errorf("no announce_rejected line yet")
		}
		return nil
	})
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	ids, err := r.models()
	if err != nil || len(ids) != 1 || ids[0] != "alpha-7b" {
		t.Fatalf("/v1/models after the flood: %v %v", ids, err)
	}
	st, err := r.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Daemons) != 1 {
		t.Fatalf("the flood changed the watch set: %v", st.Daemons)
	}
	mustServe(t, r.base, "alpha-7b")

	lines := announceEvent.FindAllStringSubmatch(r.Output(), -1)
	counts := map[string]int{}
	for _, m := range lines {
		counts[m[1]]++
	}
	t.Logf("router announce_* log lines for %d datagrams: %v", sent, counts)
	if len(lines) > 10 {
		t.Fatalf("%d announce_* log lines for one flood source: %v", len(lines), counts)
	}

	// A genuine announcement still gets through: a second daemon on
	// another node id announces itself by unicast and is watched.
	d2port := testproc.FreePort(t)
	d2 := startDaemon(t, d2port, "MENTAT_SECRET="+floodSecret, "MENTAT_NODE_IP=127.0.0.2",
		"MENTAT_ANNOUNCE_PORT="+strconv.Itoa(udpPort), "MENTAT_ANNOUNCE_ADDR=127.0.0.1:"+strconv.Itoa(udpPort))
	testproc.Eventually(t, 30*time.Second, "router watches the announced daemon", func() error {
		st, err := r.status()
		if err != nil {
			return err
		}
		if dd, ok := st.Daemons[d2.addr]; !ok || !dd.Connected {
			return fmt.Errorf("daemons %+v", st.Daemons)
		}
		return nil
	})
}
