package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/wire"
)

func TestAdmissionAndOutputs(t *testing.T) {
	alpha := startEngine(t, "127.0.0.1:0", "m1", "shared")
	beta := startEngine(t, "127.0.0.1:0", "m2", "shared")
	deadLn, _ := net.Listen("tcp", "127.0.0.1:0")
	deadPort := deadLn.Addr().(*net.TCPAddr).Port
	deadLn.Close()

	urlForm := map[string]wire.Service{wire.ServiceOpenAI: {Host: "localhost", Port: beta.port(), Path: "/v1"}}
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"alpha":  group("127.0.0.1", openai(alpha.port(), ""), "running", "dead"),
		"beta":   group("127.0.0.1", urlForm, "running"),
		"idle":   group("127.0.0.1", openai(alpha.port(), ""), "spawning"),
		"noapi":  group("127.0.0.1", map[string]wire.Service{wire.ServiceMCP: {Port: 9000, Path: "/mcp"}}, "running"),
		"walled": group("10.9.9.9", openai(8000, ""), "running"),
		"broken": group("127.0.0.1", openai(deadPort, "bound to 10.0.0.1 only"), "running"),
	}))
	cfg := testConfig(d.addr())
	cfg.AllowedSources = []string{"127.0.0.1"} // "localhost" fails it; the URL form is not checked
	r := startServer(t, cfg)

	a := r.waitGroup(t, "alpha", "healthy", func(g GroupStatus) bool { return g.Healthy })
	alphaURL := fmt.Sprintf("http://127.0.0.1:%d/v1", alpha.port())
	want := GroupStatus{Daemon: d.addr(), AgentsAlive: 1, ActorsRunning: 1, OpenAI: &alphaURL,
		OpenAICandidates: []string{alphaURL}, Provider: "vllm", MCP: ptr("http://127.0.0.1:9000/mcp"),
		Healthy: true, Models: []string{"m1", "shared"}}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("alpha\n got %+v\nwant %+v", a, want)
	}
	r.waitGroup(t, "beta", "healthy (URL form, allowlist not applied)", func(g GroupStatus) bool { return g.Healthy })
	r.waitGroup(t, "idle", "no running actors", func(g GroupStatus) bool { return whyNot(g) == "no running actors" })
	r.waitGroup(t, "noapi", "no endpoint", func(g GroupStatus) bool { return whyNot(g) == "no announced OpenAI endpoint" })
	r.waitGroup(t, "walled", "allowlist", func(g GroupStatus) bool {
		return whyNot(g) == "announced 8000/v1 on 10.9.9.9, and no address of that node passes ALLOWED_SOURCES"
	})
	deadURL := fmt.Sprintf("http://127.0.0.1:%d/v1", deadPort)
	b := r.waitGroup(t, "broken", "probe failed", func(g GroupStatus) bool { return strings.HasPrefix(whyNot(g), "endpoint probe failed") })
	if whyNot(b) != "endpoint probe failed: "+deadURL+": connection refused (agent reports: bound to 10.0.0.1 only)" ||
		b.Healthy || b.OpenAI != nil || str(b.OpenAINote) != "bound to 10.0.0.1 only" {
		t.Fatalf("broken: %+v %q", b, whyNot(b))
	}

	doc := r.status(t)
	// A model two groups serve has both as replicas, sorted by group;
	// group and url name the first.
	betaURL := fmt.Sprintf("http://localhost:%d/v1", beta.port())
	alphaRep := ReplicaLocation{Group: "alpha", URL: alphaURL, State: "ready"}
	betaRep := ReplicaLocation{Group: "beta", URL: betaURL, State: "ready"}
	wantModels := map[string]ModelLocation{
		"m1":     {Group: "alpha", URL: alphaURL, Replicas: []ReplicaLocation{alphaRep}},
		"shared": {Group: "alpha", URL: alphaURL, Replicas: []ReplicaLocation{alphaRep, betaRep}},
		"m2":     {Group: "beta", URL: betaURL, Replicas: []ReplicaLocation{betaRep}},
	}
	if !reflect.DeepEqual(doc.Models, wantModels) {
		t.Fatalf("models %+v", doc.Models)
	}
	dm := doc.Daemons[d.addr()]
	if !dm.Connected || dm.Error != nil || dm.NodeID != wire.NodeID("127.0.0.1") || !dm.Seed || dm.AgeS == nil {
		t.Fatalf("daemon %+v", dm)
	}

	// /v1/models: every field kept, owned_by the group, a shared id once.
	var list struct {
		Object string                       `json:"object"`
		Data   []map[string]json.RawMessage `json:"data"`
	}
	r.get(t, "/v1/models", &list)
	var ids []string
	for _, e := range list.Data {
		var id, owner string
		json.Unmarshal(e["id"], &id)
		json.Unmarshal(e["owned_by"], &owner)
		ids = append(ids, id+"@"+owner)
		if string(e["max_model_len"]) != "4096" || string(e["root"]) == "" || string(e["permission"]) != `[{"id":"p"}]` || string(e["parent"]) != "null" {
			t.Fatalf("entry lost fields: %v", e)
		}
	}
	if list.Object != "list" || !reflect.DeepEqual(ids, []string{"m1@alpha", "shared@alpha", "m2@beta"}) {
		t.Fatalf("/v1/models %s %v", list.Object, ids)
	}

	// The published snapshot: 200 route, 503 group, 404 nothing.
	snap := r.srv.Routes().Load()
	if reps := snap.Replicas["shared"]; len(reps) != 2 || reps[0].Group != "alpha" || reps[1].Group != "beta" || reps[1].Probed.IsZero() {
		t.Fatalf("replicas of shared: %+v", reps)
	}
	if rt, _ := snap.Lookup("m2"); rt == nil || rt.Group != "beta" || rt.Root.String() != fmt.Sprintf("http://localhost:%d", beta.port()) {
		t.Fatalf("lookup m2: %+v", rt)
	}
	if rt, g := snap.Lookup("broken"); rt != nil || g == nil || !strings.HasPrefix(g.WhyNot, "endpoint probe failed") {
		t.Fatal("lookup broken")
	}
	if rt, g := snap.Lookup("nothing"); rt != nil || g != nil {
		t.Fatal("lookup nothing")
	}

	resp, err := http.Get(r.base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("healthz %d %q", resp.StatusCode, body)
	}
	var raw map[string]any
	r.get(t, "/status.json", &raw)
	if _, ok := raw["uptime_s"].(float64); !ok {
		t.Fatalf("uptime_s missing: %v", raw)
	}

	// Actors stop: the group leaves the route table with the reason, and
	// its last models still answer 503 rather than 404.
	d.mu.Lock()
	d.snap.Groups["alpha"] = group("127.0.0.1", openai(alpha.port(), ""), "dead")
	d.mu.Unlock()
	r.waitGroup(t, "alpha", "no running actors", func(g GroupStatus) bool { return whyNot(g) == "no running actors" })
	if rt, g := r.srv.Routes().Load().Lookup("m1"); rt != nil || g == nil || g.Name != "alpha" {
		t.Fatalf("m1 after its actors died: %v %v", rt, g)
	}
	if rt, _ := r.srv.Routes().Load().Lookup("shared"); rt == nil || rt.Group != "beta" {
		t.Fatalf("shared should fall to beta: %+v", rt)
	}
}

func ptr(s string) *string { return &s }

// listenSamePort binds a listener on ip at the port of an existing one, so
// one port-form announcement resolves to both.
func listenSamePort(t *testing.T, ip string, port int) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Skipf("cannot bind %s:%d (loopback alias not available): %v", ip, port, err)
	}
	return ln
}

func TestFallThroughAndPromotion(t *testing.T) {
	lower := startEngine(t, "127.0.0.1:0", "m")
	port := lower.port()
	// The node ranks 127.0.0.2 first; nothing listens there yet.
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.2", "127.0.0.1"}, map[string]wire.Group{
		"g": group("127.0.0.1", openai(port, ""), "running"),
	}))
	r := startServer(t, testConfig(d.addr()))
	best, second := fmt.Sprintf("http://127.0.0.2:%d/v1", port), fmt.Sprintf("http://127.0.0.1:%d/v1", port)

	g := r.waitGroup(t, "g", "serving from the second candidate", func(g GroupStatus) bool { return g.Healthy && str(g.OpenAI) == second })
	if !reflect.DeepEqual(g.OpenAICandidates, []string{best, second}) {
		t.Fatalf("candidates %v", g.OpenAICandidates)
	}
	// The preferred address comes back: promoted within PROBE_PROMOTE_S.
	upper := serveEngine(t, listenSamePort(t, "127.0.0.2", port), "m")
	r.waitGroup(t, "g", "promoted back", func(g GroupStatus) bool { return g.Healthy && str(g.OpenAI) == best })
	if rt, _ := r.srv.Routes().Load().Lookup("m"); rt == nil || rt.Base.String() != best {
		t.Fatalf("route not on the promoted candidate: %+v", rt)
	}
	// It dies: live traffic falls through to the next one.
	upper.stop()
	r.waitGroup(t, "g", "fell through", func(g GroupStatus) bool { return g.Healthy && str(g.OpenAI) == second })
	// Both die: the failure quotes every candidate tried.
	lower.stop()
	g = r.waitGroup(t, "g", "probe failed", func(g GroupStatus) bool { return strings.HasPrefix(whyNot(g), "endpoint probe failed") })
	want := "endpoint probe failed: " + second + ": connection refused; " + best + ": connection refused"
	if whyNot(g) != want {
		t.Fatalf("why_not %q\nwant    %q", whyNot(g), want)
	}
}

func TestOnLinkCandidatesFirst(t *testing.T) {
	e := startEngine(t, "127.0.0.1:0", "m")
	// The node ranks an off-link address first; ours is the second.
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.2", "127.0.0.1"}, map[string]wire.Group{
		"g": group("127.0.0.1", openai(e.port(), ""), "running"),
	}))
	cfg := testConfig(d.addr())
	cfg.Subnets = func() []*net.IPNet { return subnets("127.0.0.1/32") }
	r := startServer(t, cfg)
	g := r.waitGroup(t, "g", "healthy", func(g GroupStatus) bool { return g.Healthy })
	on, off := fmt.Sprintf("http://127.0.0.1:%d/v1", e.port()), fmt.Sprintf("http://127.0.0.2:%d/v1", e.port())
	if !reflect.DeepEqual(g.OpenAICandidates, []string{on, off}) || str(g.OpenAI) != on {
		t.Fatalf("on-link not first: %+v", g)
	}
}

func TestProbeRetriesReusedConnection(t *testing.T) {
	e := startEngine(t, "127.0.0.1:0", "m")
	e.mode.Store(engineDirtyReuse)
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"g": group("127.0.0.1", openai(e.port(), ""), "running"),
	}))
	r := startServer(t, testConfig(d.addr()))
	r.waitGroup(t, "g", "healthy", func(g GroupStatus) bool { return g.Healthy })
	deadline := time.Now().Add(20 * time.Second)
	for r.srv.ProbeRetries() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no fresh-connection retries after %d probes", e.hits.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.logs.CountEvent("probe_failed"); n != 0 {
		t.Fatalf("a keep-alive close marked the group unhealthy:\n%s", r.logs.String())
	}
	if g := r.status(t).Groups["g"]; !g.Healthy {
		t.Fatalf("unhealthy after retries: %+v", g)
	}
}

func TestProbeUnprobedAndStale(t *testing.T) {
	e := startEngine(t, "127.0.0.1:0", "m")
	e.mode.Store(engineHang)
	d := newFakeDaemon(t, nodeSnap("127.0.0.1", []string{"127.0.0.1"}, map[string]wire.Group{
		"g": group("127.0.0.1", openai(e.port(), ""), "running"),
	}))
	cfg := testConfig(d.addr())
	cfg.ProbeTimeout = 1500 * time.Millisecond
	cfg.ProbeFresh = 400 * time.Millisecond
	r := startServer(t, cfg)
	// The first probe hangs: the group is known, not probed yet (also
	// before the probe reaches the engine, so wait for that too).
	r.waitGroup(t, "g", "not probed yet", func(g GroupStatus) bool { return whyNot(g) == "not probed yet" })
	eventually(t, "a probe in flight", func() bool { return e.hits.Load() > 0 })
	if g := r.status(t).Groups["g"]; whyNot(g) != "not probed yet" {
		t.Fatalf("with its first probe hanging the group is %q", whyNot(g))
	}
	e.mode.Store(engineOK)
	close(e.release)
	r.waitGroup(t, "g", "healthy", func(g GroupStatus) bool { return g.Healthy })
	// The engine wedges: the last good result ages past PROBE_FRESH_S
	// while the next probe waits out its timeout.
	e.release = make(chan struct{})
	e.mode.Store(engineHang)
	r.waitGroup(t, "g", "stale", func(g GroupStatus) bool { return whyNot(g) == "endpoint probe stale" })
	url := fmt.Sprintf("http://127.0.0.1:%d/v1", e.port())
	r.waitGroup(t, "g", "timed out", func(g GroupStatus) bool {
		return whyNot(g) == "endpoint probe failed: "+url+": no answer within 1.5s"
	})
}

// A node that stops announcing the address a probe is stuck on (its link
// went down) must not hold the group unroutable until PROBE_TIMEOUT_S runs
// out: the changed list cancels the stuck round and the next candidate is
// probed at once.
func TestDroppedCandidateCancelsStuckProbe(t *testing.T) {
	good, stuck, d, r := startHeldPair(t, "127.0.0.2", "127.0.0.1")
	port := good.port()
	for end := time.Now().Add(20 * time.Second); stuck.hits.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the router never probed 127.0.0.2")
		}
	}

	d.mu.Lock()
	d.snap = nodeSnap("127.0.0.1", []string{"127.0.0.1"}, d.snap.Groups)
	d.mu.Unlock()
	second := fmt.Sprintf("http://127.0.0.1:%d/v1", port)
	r.waitGroup(t, "g", "serving from the remaining candidate", func(g GroupStatus) bool { return g.Healthy && str(g.OpenAI) == second })
}

// The node drops the address in use from its ranking (its link went down
// and the daemon re-read its interfaces) while the remaining candidate's
// probe is still in flight. The model must stay in the route table on the
// last proven candidate until that probe answers: a working candidate is
// left, so the model never leaves /v1/models. The remaining candidate's
// probe is held open by the engine, which makes the window as wide as the
// test needs instead of the few milliseconds it lasts on an idle machine.
func TestDroppedInUseCandidateKeepsModelRoutable(t *testing.T) {
	first, next, d, r := startHeldPair(t, "127.0.0.1", "127.0.0.2")
	port := first.port()
	inUse, remaining := fmt.Sprintf("http://127.0.0.1:%d/v1", port), fmt.Sprintf("http://127.0.0.2:%d/v1", port)
	r.waitGroup(t, "g", "serving from the first candidate", func(g GroupStatus) bool { return g.Healthy && str(g.OpenAI) == inUse })
	if next.hits.Load() != 0 {
		t.Fatal("the second candidate was probed while the first answered")
	}

	d.mu.Lock()
	d.snap = nodeSnap("127.0.0.1", []string{"127.0.0.2"}, d.snap.Groups)
	d.mu.Unlock()
	// The router has the new list and its probe of the remaining candidate
	// is in flight (held): this is the window the race lives in.
	r.waitGroup(t, "g", "the new candidate list", func(g GroupStatus) bool {
		return reflect.DeepEqual(g.OpenAICandidates, []string{remaining})
	})
	for end := time.Now().Add(20 * time.Second); next.hits.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the router never probed the remaining candidate")
		}
	}
	if g := r.status(t).Groups["g"]; !g.Healthy || str(g.OpenAI) != inUse || whyNot(g) != "" {
		t.Fatalf("the model left the route table while its remaining candidate was being probed: %+v why_not %q", g, whyNot(g))
	}
	if rt, _ := r.srv.Routes().Load().Lookup("m"); rt == nil || rt.Base.String() != inUse {
		t.Fatalf("m not routed on the last proven candidate during the probe: %+v", rt)
	}

	// The remaining candidate answers: traffic moves to it.
	next.mode.Store(engineOK)
	close(next.release)
	r.waitGroup(t, "g", "serving from the remaining candidate", func(g GroupStatus) bool { return g.Healthy && str(g.OpenAI) == remaining })
}

// startHeldPair serves model m for group g on one port at two addresses:
// 127.0.0.1 answers, 127.0.0.2 holds every probe open until its release
// is closed (PROBE_TIMEOUT_S is far beyond waitGroup's 20 s). The node
// ranks its addresses as given.
func startHeldPair(t *testing.T, ranking ...string) (answering, held *fakeEngine, d *fakeDaemon, r *running) {
	t.Helper()
	answering = startEngine(t, "127.0.0.1:0", "m")
	held = serveEngine(t, listenSamePort(t, "127.0.0.2", answering.port()), "m")
	held.mode.Store(engineHang)
	d = newFakeDaemon(t, nodeSnap("127.0.0.1", ranking, map[string]wire.Group{
		"g": group("127.0.0.1", openai(answering.port(), ""), "running"),
	}))
	cfg := testConfig(d.addr())
	cfg.ProbeTimeout = time.Minute
	cfg.ProbeFresh = 2 * time.Minute
	return answering, held, d, startServer(t, cfg)
}
