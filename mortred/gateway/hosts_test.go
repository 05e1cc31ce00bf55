package gateway

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/prometheus/client_golang/prometheus"
)

// twoHosts starts gateways h1 and h2, each in front of its own fake model
// M, with one peers table naming both. The counters count the requests
// each model server got.
func twoHosts(t *testing.T) (h1, h2 *testServer, g1, g2 *Gateway, hits1, hits2 *atomic.Int64) {
	t.Helper()
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peers := map[string]string{"h1": l1.Addr().String(), "h2": l2.Addr().String()}
	hits1, hits2 = new(atomic.Int64), new(atomic.Int64)
	start := func(id string, ln net.Listener, hits *atomic.Int64) (*testServer, *Gateway) {
		m := fakeModel(t)
		counted := &Upstream{ID: "M", URI: "/m", Addr: countingProxy(t, m.URL, hits), Token: modelTok}
		cfg := Config{Token: tok, MetricsToken: mtok, MaxBody: 1 << 20, HostID: id, Peers: peers, Upstreams: []Upstream{*counted}}
		s, g, _ := serveGateway(t, cfg, logx.Discard(), ln, prometheus.NewRegistry())
		return s, g
	}
	h1, g1 = start("h1", l1, hits1)
	h2, g2 = start("h2", l2, hits2)
	return
}

// countingProxy is a loopback address that counts requests and passes
// them to the fake model at url.
func countingProxy(t *testing.T, url string, hits *atomic.Int64) string {
	t.Helper()
	target := strings.TrimPrefix(url, "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		r.URL.Scheme, r.URL.Host, r.RequestURI = "http", target, ""
		resp, err := tr.RoundTrip(r)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			_, _ = w.Write(buf[:n])
			if err != nil {
				return
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
	return ln.Addr().String()
}

func TestJobsAcrossHosts(t *testing.T) {
	h1, h2, _, _, hits1, hits2 := twoHosts(t)

	resp, body := do(t, "POST", h1.URL+"/v1/models/M/jobs", tok, strings.NewReader(`{}`))
	var job map[string]any
	if err := json.Unmarshal(body, &job); err != nil || resp.StatusCode != 202 {
		t.Fatalf("submit: %d %s %v", resp.StatusCode, body, err)
	}
	if job["job_id"] != "h1.j1" || job["poll_url"] != "/v1/models/M/jobs/h1.j1" || job["result_url"] != "/v1/models/M/jobs/h1.j1/result" ||
		resp.Header.Get("Location") != "/v1/models/M/jobs/h1.j1" || resp.Header.Get(headerHost) != "h1" {
		t.Fatalf("the job id does not name its host: %s %v", body, resp.Header)
	}

	before1, before2 := hits1.Load(), hits2.Load()
	for path, want := range map[string]string{
		"/v1/models/M/jobs/h1.j1":                `"path":"/jobs/j1"`,
		"/v1/models/M/jobs/h1.j1/wait?timeout=5": `"query":"timeout=5"`,
		"/v1/models/M/jobs/h1.j1/result":         `"path":"/jobs/j1/result"`,
	} {
		resp, body := do(t, "GET", h2.URL+path, tok, nil)
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) || resp.Header.Get(headerHost) != "h1" {
			t.Errorf("GET %s through h2: %d %v %s", path, resp.StatusCode, resp.Header, body)
		}
		if path == "/v1/models/M/jobs/h1.j1" && !strings.Contains(string(body), `"poll_url":"/v1/models/M/jobs/h1.j1"`) {
			t.Errorf("the holder's rewrite did not reach the client: %s", body)
		}
	}
	if got1, got2 := hits1.Load()-before1, hits2.Load()-before2; got1 != 3 || got2 != 0 {
		t.Fatalf("h1's model got %d requests, h2's %d; want 3 and 0", got1, got2)
	}

	// Refused before any hop: a made-up host, a bad token, a wrong method.
	for _, c := range []struct {
		method, path, token string
		code                int
	}{
		{"GET", "/v1/models/M/jobs/h9.j1", tok, 404},
		{"GET", "/v1/models/M/jobs/h1.j1", "wrong", 401},
		{"POST", "/v1/models/M/jobs/h1.j1", tok, 405},
		{"GET", "/v1/models/NOPE/jobs/h1.j1", tok, 404},
	} {
		resp, body := do(t, c.method, h2.URL+c.path, c.token, nil)
		if resp.StatusCode != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, resp.StatusCode, body, c.code)
		}
	}
	if got1, got2 := hits1.Load()-before1, hits2.Load()-before2; got1 != 3 || got2 != 0 {
		t.Fatalf("a refused request reached a model: h1 %d, h2 %d", got1-3, got2)
	}

	// A forwarded request is never forwarded again.
	req, _ := http.NewRequest("GET", h2.URL+"/v1/models/M/jobs/h1.j1", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set(headerVia, "h3")
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 502 {
		t.Fatalf("a forwarded request for another host: %d, want 502", r2.StatusCode)
	}
}

func TestJobOfAHostThatIsDown(t *testing.T) {
	h1, h2, _, _, _, _ := twoHosts(t)
	// h1's listener closes; its address refuses from now on.
	h1.stop()
	resp, body := do(t, "GET", h2.URL+"/v1/models/M/jobs/h1.j1/wait", tok, nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "host h1") || !strings.Contains(string(body), `"status":65`) {
		t.Fatalf("a job of a host that is down: %d %v %s; want 503 naming host h1", resp.StatusCode, resp.Header, body)
	}
}

func TestReadyz(t *testing.T) {
	m := fakeModel(t)
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	down.Close()
	gw, g, _ := newGatewayWith(t, Config{HostID: "h1"},
		Upstream{ID: "UP", URI: "/up", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok},
		Upstream{ID: "DOWN", URI: "/down", Addr: downAddr, Token: modelTok})

	var ans readyAnswer
	get := func(path string) *http.Response {
		t.Helper()
		resp, body := do(t, "GET", gw.URL+path, "", nil)
		ans = readyAnswer{}
		if resp.StatusCode != 404 {
			if err := json.Unmarshal(body, &ans); err != nil {
				t.Fatalf("%s: %v %s", path, err, body)
			}
		}
		return resp
	}
	if resp := get("/readyz"); resp.StatusCode != 200 || !ans.Ready || ans.Host != "h1" || len(ans.Models) != 2 ||
		!ans.Models[0].Ready || ans.Models[1].Ready || !strings.Contains(ans.Models[1].Reason, "not running") {
		t.Fatalf("/readyz: %d %+v", resp.StatusCode, ans)
	}
	if resp := get("/readyz?model=UP"); resp.StatusCode != 200 || len(ans.Models) != 1 || ans.Models[0].ID != "UP" {
		t.Fatalf("/readyz?model=UP: %d %+v", resp.StatusCode, ans)
	}
	if resp := get("/readyz?model=DOWN"); resp.StatusCode != 503 || ans.Ready {
		t.Fatalf("/readyz?model=DOWN: %d %+v", resp.StatusCode, ans)
	}
	if resp := get("/readyz?model=NOPE"); resp.StatusCode != 404 {
		t.Fatalf("/readyz?model=NOPE: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "POST", gw.URL+"/readyz", "", nil); resp.StatusCode != 405 {
		t.Fatalf("POST /readyz: %d", resp.StatusCode)
	}

	g.Drain()
	if resp := get("/readyz?model=UP"); resp.StatusCode != 503 || ans.Ready || !ans.Draining || !ans.Models[0].Ready {
		t.Fatalf("draining: %d %+v", resp.StatusCode, ans)
	}
	resp, _ := do(t, "POST", gw.URL+"/v1/models/UP/infer", tok, strings.NewReader(`{}`))
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("a request while draining: %d, close %v; want served, and its connection closed", resp.StatusCode, resp.Close)
	}
}

func TestHostConfig(t *testing.T) {
	base := func(id string, peers map[string]string) Config {
		return Config{Token: "t", MetricsToken: "m", HostID: id, Peers: peers}
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{base("", map[string]string{"h2": "127.0.0.1:1"}), "needs this host's own id"},
		{base("H1", nil), "lower-case"},
		{base("h.1", nil), "lower-case"},
		{base(strings.Repeat("h", 33), nil), "1 to 32"},
		{base("h1", map[string]string{"h2": "nowhere"}), "not host:port"},
		{base("h1", map[string]string{"h_2": "127.0.0.1:1"}), "lower-case"},
	} {
		if _, err := New(c.cfg, logx.Discard(), nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	g, err := New(base("h1", map[string]string{"h1": "10.0.0.1:8080", "h2": "10.0.0.2:8080"}), logx.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if len(g.peers) != 1 || g.peers["h2"] == nil {
		t.Fatalf("peers %v: want h2 only (h1 is this host)", g.peers)
	}
	// A peer's gateway is trusted with the client's address, as the
	// loopback edge is; anyone else is not.
	for remote, want := range map[string]string{"10.0.0.2:5000": "203.0.113.7", "10.0.0.9:5000": "203.0.113.7, 10.0.0.9"} {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {"203.0.113.7"}}}
		if got := g.forwardedFor(r); got != want {
			t.Errorf("from %s: X-Forwarded-For %q, want %q", remote, got, want)
		}
	}
	if !g.trustedProxy(netip.MustParseAddr("127.0.0.1")) {
		t.Error("loopback is no longer trusted")
	}
}
