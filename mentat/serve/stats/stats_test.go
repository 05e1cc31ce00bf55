package stats

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// engine serves a fixture on /metrics and counts scrapes.
type engine struct {
	*httptest.Server
	scrapes atomic.Int64
	gate    chan struct{} // when non-nil, /metrics waits for it to close
}

func newEngine(t *testing.T, fixture string) *engine {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		e.scrapes.Add(1)
		if e.gate != nil {
			<-e.gate
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(body)
	}))
	t.Cleanup(e.Close)
	return e
}

// registry is a fake proxy: it tracks requests while their handler runs.
type registry struct {
	mu   sync.Mutex
	next uint64
	reqs map[uint64]*Request
}

func (g *registry) add(q Request) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reqs == nil {
		g.reqs = map[uint64]*Request{}
	}
	g.next++
	q.ID = g.next
	g.reqs[q.ID] = &q
	return q.ID
}

func (g *registry) remove(id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.reqs, id)
}

func (g *registry) update(id uint64, f func(*Request)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g.reqs[id])
}

func (g *registry) Requests() []Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Request, 0, len(g.reqs))
	for _, q := range g.reqs {
		out = append(out, *q)
	}
	return out
}

func (g *registry) Proxied(model, group string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, q := range g.reqs {
		if q.Model == model && q.Group == group {
			n++
		}
	}
	return n
}

var _ Inflight = (*registry)(nil)

func route(t *testing.T, model, group, base, provider string) *routes.Route {
	t.Helper()
	r, err := routes.NewRoute(model, group, base, provider)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func getDoc(t *testing.T, url string) Document {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	var doc Document
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func findRow(doc Document, model string) *Row {
	for i := range doc.Models {
		if doc.Models[i].Model == model {
			return &doc.Models[i]
		}
	}
	return nil
}

func TestDocumentRows(t *testing.T) {
	cur := newEngine(t, "vllm-current.txt")
	old := newEngine(t, "vllm-v0.txt")
	var h routes.Holder
	h.Store(routes.New(time.Now(),
		map[string]*routes.Route{
			"glm53": route(t, "glm53", "glm53", cur.URL+"/v1", "vllm"),
			"other": route(t, "other", "glm53", cur.URL+"/v1", "vllm"),
			"llama": route(t, "llama", "llama", old.URL+"/v1", "vllm"),
			"gone":  route(t, "gone", "gone", "http://127.0.0.1:1/v1", ""),
		},
		map[string]*routes.Group{
			"glm53": {Name: "glm53", Healthy: true, Provider: "vllm", Models: []string{"glm53", "other"}},
			"llama": {Name: "llama", Healthy: true, Provider: "vllm", Models: []string{"llama"}},
			"gone":  {Name: "gone", Healthy: true, Models: []string{"gone"}},
			"qwen": {Name: "qwen", Healthy: false, Provider: "vllm", Models: []string{"qwen"},
				WhyNot: "endpoint probe failed: http://10.0.0.9:8000/v1: connection refused"},
			"fresh": {Name: "fresh", Healthy: false, WhyNot: "not probed yet"},
		}, nil))
	reg := &registry{}
	reg.add(Request{Model: "glm53", Group: "glm53", Started: time.Now()})
	s := New(&h, reg, nil, nil)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	doc := getDoc(t, srv.URL)
	if len(doc.Models) != 6 {
		t.Fatalf("rows = %d, want 6: %+v", len(doc.Models), doc.Models)
	}
	// Routable models first, by name, then failing groups by name.
	order := []string{"glm53", "gone", "llama", "other", "fresh", "qwen"}
	for i, m := range order {
		if doc.Models[i].Model != m {
			t.Errorf("row %d = %s, want %s", i, doc.Models[i].Model, m)
		}
	}
	g := findRow(doc, "glm53")
	if !g.Healthy || g.WhyNot != nil || g.Proxied != 1 || g.Provider != "vllm" {
		t.Errorf("glm53 row: %+v", g)
	}
	checkNum(t, "glm53 running", g.Running, ptr(3))
	checkNum(t, "glm53 kv", g.KV, ptr(0.5))
	checkNum(t, "glm53 ttft", g.TTFTS, ptr(0.84))
	checkNum(t, "glm53 queue", g.QueueS, ptr(8.27))
	checkNum(t, "glm53 itl", g.ITLS, ptr(0.031))
	if g.Finished["stop"] != 170 {
		t.Errorf("glm53 finished = %v", g.Finished)
	}
	checkNum(t, "other running", findRow(doc, "other").Running, ptr(7))
	l := findRow(doc, "llama")
	checkNum(t, "llama kv", l.KV, ptr(0.25))
	checkNum(t, "llama itl", l.ITLS, ptr(0.05))
	// One scrape per engine, however many models it serves.
	if n := cur.scrapes.Load(); n != 1 {
		t.Errorf("current engine scraped %d times, want 1", n)
	}

	// An engine whose /metrics fails keeps a healthy row with the reason.
	gone := findRow(doc, "gone")
	if !gone.Healthy || gone.ScrapeError == "" || gone.Running != nil {
		t.Errorf("gone row: %+v", gone)
	}

	q := findRow(doc, "qwen")
	if q.Healthy || q.WhyNot == nil || *q.WhyNot != "endpoint probe failed: http://10.0.0.9:8000/v1: connection refused" ||
		q.Running != nil || q.KV != nil || q.Finished != nil || q.Group != "qwen" {
		t.Errorf("qwen row: %+v", q)
	}
	if f := findRow(doc, "fresh"); f == nil || *f.WhyNot != "not probed yet" {
		t.Errorf("fresh row: %+v", f)
	}

	// The raw JSON says null, not 0, for numbers a failing group lacks.
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Models []map[string]any `json:"models"`
	}
	err = json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range raw.Models {
		if r["model"] == "qwen" {
			if v, ok := r["running"]; !ok || v != nil {
				t.Errorf("qwen running = %v (present %v), want null", v, ok)
			}
		}
	}
}

func TestScrapeCachedAndShared(t *testing.T) {
	e := newEngine(t, "vllm-current.txt")
	e.gate = make(chan struct{})
	var h routes.Holder
	h.Store(routes.New(time.Now(),
		map[string]*routes.Route{"glm53": route(t, "glm53", "glm53", e.URL+"/v1", "vllm")},
		map[string]*routes.Group{"glm53": {Name: "glm53", Healthy: true, Models: []string{"glm53"}}}, nil))
	s := New(&h, nil, nil, nil)
	s.scraper.ttl = time.Hour

	const loads = 8
	var wg sync.WaitGroup
	docs := make([]Document, loads)
	for i := range loads {
		wg.Go(func() { docs[i] = s.Document(context.Background()) })
	}
	// Every load is waiting on the one scrape in progress.
	deadline := time.Now().Add(10 * time.Second)
	for e.scrapes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(e.gate)
	wg.Wait()
	if n := e.scrapes.Load(); n != 1 {
		t.Fatalf("%d concurrent loads caused %d scrapes, want 1", loads, n)
	}
	for i, d := range docs {
		checkNum(t, "running", d.Models[0].Running, ptr(3))
		if d.Models[0].ScrapeError != "" {
			t.Errorf("load %d: %s", i, d.Models[0].ScrapeError)
		}
	}
	s.Document(context.Background())
	if n := e.scrapes.Load(); n != 1 {
		t.Fatalf("a load within the TTL scraped again (%d scrapes)", n)
	}
	// Past the TTL the next load scrapes afresh.
	s.scraper.ttl = 0
	s.Document(context.Background())
	if n := e.scrapes.Load(); n != 2 {
		t.Fatalf("a load past the TTL did not scrape (%d scrapes)", n)
	}
}

// A waiting page load whose client hangs up returns at once; the scrape it
// was waiting on still completes for the others.
func TestScrapeWaiterCancel(t *testing.T) {
	e := newEngine(t, "vllm-current.txt")
	e.gate = make(chan struct{})
	var h routes.Holder
	h.Store(routes.New(time.Now(),
		map[string]*routes.Route{"glm53": route(t, "glm53", "glm53", e.URL+"/v1", "vllm")},
		map[string]*routes.Group{"glm53": {Name: "glm53", Healthy: true, Models: []string{"glm53"}}}, nil))
	s := New(&h, nil, nil, nil)
	first := make(chan Document)
	go func() { first <- s.Document(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for e.scrapes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := s.Document(ctx)
	if d.Models[0].ScrapeError == "" {
		t.Errorf("cancelled load reported numbers: %+v", d.Models[0])
	}
	close(e.gate)
	if d := <-first; d.Models[0].ScrapeError != "" {
		t.Errorf("leader: %s", d.Models[0].ScrapeError)
	}
}

// Requests appear while the proxy carries them and leave when they end,
// including when the client hangs up.
func TestRequestRows(t *testing.T) {
	reg := &registry{}
	firstByte := make(chan struct{})
	// A stand-in for the proxy: it registers each request for as long as
	// its handler runs, like the real one must.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body to its end is what lets net/http notice a
		// client that hangs up, as the real proxy does.
		_, _ = io.Copy(io.Discard, r.Body)
		id := reg.add(Request{Model: r.URL.Query().Get("model"), Group: "g", Started: time.Now(),
			BodyBytes: r.ContentLength, Stream: r.URL.Query().Has("stream")})
		defer reg.remove(id)
		if r.URL.Query().Has("stream") {
			<-firstByte
			reg.update(id, func(q *Request) { q.FirstByte = time.Now(); q.OutBytes = 6 })
			_, _ = w.Write([]byte("data: "))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	defer proxy.Close()

	var h routes.Holder
	s := New(&h, reg, nil, nil)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	waitFor := func(what string, ok func(Document) bool) Document {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			d := getDoc(t, srv.URL)
			if ok(d) {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; last document %+v", what, d)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ctx1, hangUp1 := context.WithCancel(context.Background())
	ctx2, hangUp2 := context.WithCancel(context.Background())
	defer hangUp1()
	defer hangUp2()
	send := func(ctx context.Context, query, body string) chan error {
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", proxy.URL+"/?"+query, strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
		return done
	}
	// One after the other, so that a has the lower ID.
	done1 := send(ctx1, "model=a", "12345")
	waitFor("a's row", func(d Document) bool { return len(d.Requests) == 1 })
	done2 := send(ctx2, "model=b&stream", "xy")

	d := waitFor("two rows", func(d Document) bool { return len(d.Requests) == 2 })
	for _, q := range d.Requests {
		if q.WaitingS == nil || q.TTFBS != nil {
			t.Errorf("before first byte: %+v", q)
		}
	}
	if a := d.Requests[0]; a.Model != "a" || a.BodyBytes != 5 || a.Stream || a.Group != "g" {
		t.Errorf("row a: %+v", a)
	}
	if b := d.Requests[1]; b.Model != "b" || !b.Stream || b.ID <= d.Requests[0].ID {
		t.Errorf("row b: %+v", b)
	}

	close(firstByte)
	d = waitFor("first byte of b", func(d Document) bool {
		return len(d.Requests) == 2 && d.Requests[1].TTFBS != nil
	})
	if b := d.Requests[1]; b.WaitingS != nil || b.OutBytes != 6 || *b.TTFBS > b.AgeS {
		t.Errorf("after first byte: %+v", b)
	}

	hangUp1()
	<-done1
	d = waitFor("a to leave after its client hung up", func(d Document) bool { return len(d.Requests) == 1 })
	if d.Requests[0].Model != "b" {
		t.Errorf("left the wrong row: %+v", d.Requests)
	}
	hangUp2()
	<-done2
	waitFor("b to leave", func(d Document) bool { return len(d.Requests) == 0 })
}

// A router that knows nothing because no daemon answers says so in the
// document the status page reads; once a group is known it says nothing.
func TestDocumentDiscoveryNote(t *testing.T) {
	var h routes.Holder
	h.Store(routes.New(time.Now(), nil, nil, map[string]*routes.Daemon{"127.0.0.1:6380": {Error: "GET /status: connection refused"}}))
	srv := httptest.NewServer(New(&h, nil, nil, nil).Handler())
	defer srv.Close()
	if doc := getDoc(t, srv.URL); doc.Discovery != "no mentatd daemon is reachable (127.0.0.1:6380: GET /status: connection refused)" {
		t.Fatalf("discovery = %q", doc.Discovery)
	}
	h.Store(routes.New(time.Now(), nil, map[string]*routes.Group{"g": {Name: "g", WhyNot: "not probed yet"}},
		map[string]*routes.Daemon{"127.0.0.1:6380": {Connected: true}}))
	if doc := getDoc(t, srv.URL); doc.Discovery != "" {
		t.Fatalf("discovery = %q with a group known", doc.Discovery)
	}
}

// fakeRouting is a balancer view with fixed answers per group.
type fakeRouting map[string]RoutingRow

func (f fakeRouting) Replica(rt *routes.Route) RoutingRow { return f[rt.Group] }

func TestDocumentRowPerReplica(t *testing.T) {
	a, b := newEngine(t, "vllm-current.txt"), newEngine(t, "vllm-v0.txt")
	var h routes.Holder
	h.Store(routes.NewReplicated(time.Now(),
		map[string][]*routes.Route{"m": {
			route(t, "m", "rep-b", b.URL+"/v1", "vllm"),
			route(t, "m", "rep-a", a.URL+"/v1", "vllm"),
		}},
		map[string]*routes.Group{
			"rep-a": {Name: "rep-a", Healthy: true, Models: []string{"m"}},
			"rep-b": {Name: "rep-b", Healthy: true, Models: []string{"m"}},
		}, nil))
	reg := &registry{}
	reg.add(Request{Model: "m", Group: "rep-b", Started: time.Now()})
	reg.add(Request{Model: "m", Group: "rep-b", Started: time.Now()})
	s := New(&h, reg, nil, nil)
	s.SetRouting(fakeRouting{
		"rep-a": {State: "ready", Load: 1, Decisions: map[string]float64{"affinity": 4}},
		"rep-b": {State: "refused", Load: 9},
	})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	doc := getDoc(t, srv.URL)
	if len(doc.Models) != 2 {
		t.Fatalf("rows = %d, want one per replica: %+v", len(doc.Models), doc.Models)
	}
	ra, rb := doc.Models[0], doc.Models[1]
	if ra.Model != "m" || ra.Group != "rep-a" || rb.Model != "m" || rb.Group != "rep-b" {
		t.Fatalf("rows %s/%s, %s/%s; want m/rep-a then m/rep-b", ra.Model, ra.Group, rb.Model, rb.Group)
	}
	if ra.Proxied != 0 || rb.Proxied != 2 {
		t.Errorf("proxied %d and %d, want 0 and 2 (counted per replica)", ra.Proxied, rb.Proxied)
	}
	if ra.Routing == nil || ra.Routing.State != "ready" || ra.Routing.Decisions["affinity"] != 4 ||
		rb.Routing == nil || rb.Routing.State != "refused" || rb.Routing.Load != 9 {
		t.Errorf("routing %+v and %+v", ra.Routing, rb.Routing)
	}
	// Each replica's own engine numbers (no series names "m": the
	// engine's totals).
	checkNum(t, "rep-a running", ra.Running, ptr(10))
	checkNum(t, "rep-b kv", rb.KV, ptr(0.25))
	if a.scrapes.Load() != 1 || b.scrapes.Load() != 1 {
		t.Errorf("scrapes %d and %d, want one each", a.scrapes.Load(), b.scrapes.Load())
	}
}
