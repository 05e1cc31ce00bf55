package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// publishReplicas stores a snapshot where model "m" is served by one
// group per base, named r0, r1, … in order, each probed at probed.
func (rt *router) publishReplicas(t testing.TB, probed time.Time, bases ...string) []*routes.Route {
	t.Helper()
	var reps []*routes.Route
	groups := map[string]*routes.Group{}
	for i, base := range bases {
		g := fmt.Sprint("r", i)
		r, err := routes.NewRoute("m", g, base, "vllm")
		if err != nil {
			t.Fatal(err)
		}
		r.Probed = probed
		reps = append(reps, r)
		groups[g] = &routes.Group{Name: g, Healthy: true, OpenAI: base, Models: []string{"m"}, ProbedAt: probed}
	}
	rt.holder.Store(routes.NewReplicated(time.Now(), map[string][]*routes.Route{"m": append([]*routes.Route(nil), reps...)}, groups, nil))
	return reps
}

// closedBase is an OpenAI base on a loopback port nothing listens on:
// connecting is refused at once.
func closedBase(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/v1"
}

func decisions(t testing.TB, reg *prometheus.Registry, replica, reason string) float64 {
	t.Helper()
	mf := family(t, reg, "mentat_serve_routing_decisions_total")
	if mf == nil {
		return 0
	}
	for _, m := range mf.GetMetric() {
		if labelsMatch(m, map[string]string{"model": "m", "replica": replica, "reason": reason}) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestRefusedReplicaSkippedAtOnce(t *testing.T) {
	up := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	})
	reg := prometheus.NewRegistry()
	rt := newRouter(t, Config{Balancer: balance.New(balance.Config{Policy: balance.First}, reg)})
	// r0 (first by name) refuses; r1 answers.
	reps := rt.publishReplicas(t, time.Now().Add(-time.Second), closedBase(t), up.base())
	for i := range 3 {
		resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		if body := readAllString(t, resp.Body); resp.StatusCode != 200 || body != `{"ok":true}` {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		resp.Body.Close()
	}
	if n := up.requests.Load(); n != 3 {
		t.Errorf("the answering replica got %d requests, want 3", n)
	}
	// The first went to r0, was refused and went on; the later ones went
	// straight to r1 (r0 stays last until a probe succeeds).
	if a, b := decisions(t, reg, "r0", "order"), decisions(t, reg, "r1", "refused"); a != 1 || b != 1 {
		t.Errorf("decisions r0/order=%v r1/refused=%v, want 1 and 1", a, b)
	}
	if n := decisions(t, reg, "r1", "order"); n != 2 {
		t.Errorf("decisions r1/order=%v, want 2", n)
	}
	if s := rt.p.Balancer().Info(reps[0]).State; s != "refused" {
		t.Errorf("r0 state %q, want refused", s)
	}
	if n := rt.p.Inflight().Len(); n != 0 {
		t.Errorf("%d requests still in flight", n)
	}
}

func TestAllReplicasRefused502(t *testing.T) {
	rt := newRouter(t, Config{})
	rt.publishReplicas(t, time.Now(), closedBase(t), closedBase(t))
	resp := rt.post(t, "/v1/completions", jsonCT, `{"model":"m","prompt":"x"}`)
	body := readAllString(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d (%s), want 502", resp.StatusCode, body)
	}
	mf := family(t, rt.reg, "mentat_serve_routing_refusals_total")
	var n float64
	for _, m := range mf.GetMetric() {
		n += m.GetCounter().GetValue()
	}
	if n != 2 {
		t.Errorf("refusals = %v, want 2 (each replica tried once)", n)
	}
}

// A request whose connection was made is never sent again, even when
// the engine fails before answering.
func TestSentRequestNotResent(t *testing.T) {
	hits := make(chan string, 4)
	cut := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			hits <- name
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		}
	}
	a, b := newEngine(t, cut("a")), newEngine(t, cut("b"))
	rt := newRouter(t, Config{Balancer: balance.New(balance.Config{Policy: balance.First}, nil)})
	rt.publishReplicas(t, time.Now(), a.base(), b.base())
	resp := rt.post(t, "/v1/completions", jsonCT, `{"model":"m","prompt":"x"}`)
	readAllString(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if got := <-hits; got != "a" {
		t.Fatalf("first engine hit %s", got)
	}
	select {
	case h := <-hits:
		t.Fatalf("the request was sent again, to %s", h)
	default:
	}
}

func TestPrefixAffinityThroughProxy(t *testing.T) {
	var engines []*engine
	var bases []string
	for range 2 {
		e := newEngine(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })
		engines = append(engines, e)
		bases = append(bases, e.base())
	}
	rt := newRouter(t, Config{})
	rt.publishReplicas(t, time.Now(), bases...)
	system := fmt.Sprintf("%0500d", 7)
	for i := range 10 {
		resp := rt.post(t, "/v1/chat/completions", jsonCT,
			fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"%s"},{"role":"user","content":"q%d"}]}`, system, i))
		readAllString(t, resp.Body)
		resp.Body.Close()
	}
	a, b := engines[0].requests.Load(), engines[1].requests.Load()
	if !(a == 10 && b == 0 || a == 0 && b == 10) {
		t.Errorf("a shared prefix, sent one at a time, split %d/%d; want all on one replica", a, b)
	}
	mf := family(t, rt.reg, "mentat_serve_prefix_blocks_total")
	hits := 0.0
	for _, m := range mf.GetMetric() {
		if labelsMatch(m, map[string]string{"result": "hit"}) {
			hits = m.GetCounter().GetValue()
		}
	}
	if hits < 9 {
		t.Errorf("prefix hits %v, want at least one block for each of 9 repeats", hits)
	}
}

// A replica that leaves the snapshot gets no new request, and the stream
// it is carrying finishes.
func TestReplicaLeavingFinishesItsStreams(t *testing.T) {
	gate := make(chan struct{})
	a := newEngine(t, sseHandler(3, time.Millisecond, gate))
	b := newEngine(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })
	rt := newRouter(t, Config{Balancer: balance.New(balance.Config{Policy: balance.First}, nil)})
	rt.publishReplicas(t, time.Now(), a.base(), b.base())
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "tok0") {
		t.Fatalf("first frame %q, %v", line, err)
	}
	// r0 leaves admission mid-stream: only r1 is published.
	rt.publishReplicas(t, time.Now(), b.base())
	for i := range 3 {
		r := rt.post(t, "/v1/completions", jsonCT, `{"model":"m","prompt":"x"}`)
		readAllString(t, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("request %d after r0 left: %d", i, r.StatusCode)
		}
	}
	if a.requests.Load() != 1 || b.requests.Load() != 3 {
		t.Errorf("requests: r0 %d (want only the stream), r1 %d (want 3)", a.requests.Load(), b.requests.Load())
	}
	close(gate)
	rest := readAllString(t, br)
	if !strings.Contains(rest, "tok2") || !strings.HasSuffix(rest, "data: [DONE]\n\n") {
		t.Errorf("the stream on the replica that left did not finish: %q", rest)
	}
}
