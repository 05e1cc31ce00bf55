package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testproc.IgnoreRSTAvoidance) }

const (
	tok      = "inference-token"
	mtok     = "metrics-token"
	modelTok = "model-token"
)

// fakeModel answers like a model server: it checks the model token and
// echoes what it saw.
func fakeModel(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" {
			return // public, as on a model server
		}
		if r.Header.Get("Authorization") != "Bearer "+modelTok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Connection", "keep-alive")
		switch {
		case r.URL.Path == "/jobs" && r.Method == http.MethodPost:
			w.Header().Set("Location", "/jobs/j1")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"job_id":"j1","state":"pending","poll_url":"/jobs/j1","result_url":"/jobs/j1/result","extra":{"k":[1,2]}}`)
		case strings.HasPrefix(r.URL.Path, "/jobs/"):
			_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "query": r.URL.RawQuery, "poll_url": "/jobs/j1"})
		case r.URL.Path == "/busy":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"status":429}`)
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "len": len(body), "ct": r.Header.Get("Content-Type"), "hop": r.Header.Get("Proxy-Authorization")})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// testServer is a gateway on a loopback listener.
type testServer struct {
	URL string
	// stop closes the listener and every connection.
	stop func()
}

// newGateway serves as the gateway binary does: net/http with the edge
// limits (httpx), the gateway as its handler.
func newGateway(t *testing.T, ups ...Upstream) (*testServer, *Gateway, *prometheus.Registry) {
	return newGatewayWith(t, Config{}, ups...)
}

// newGatewayWith takes the Config fields the test sets (Edge, MaxBody);
// tokens and upstreams are filled in.
func newGatewayWith(t *testing.T, cfg Config, ups ...Upstream) (*testServer, *Gateway, *prometheus.Registry) {
	t.Helper()
	return newGatewayLog(t, cfg, logx.Discard(), ups...)
}

// newGatewayLog is newGatewayWith logging to log.
func newGatewayLog(t *testing.T, cfg Config, log *slog.Logger, ups ...Upstream) (*testServer, *Gateway, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Token, cfg.MetricsToken, cfg.Upstreams = tok, mtok, ups
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 1 << 20
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveGateway(t, cfg, log, ln, reg)
}

// serveGateway serves a gateway of cfg on ln.
func serveGateway(t *testing.T, cfg Config, log *slog.Logger, ln net.Listener, reg *prometheus.Registry) (*testServer, *Gateway, *prometheus.Registry) {
	t.Helper()
	g, err := New(cfg, log, reg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := g.cfg.Edge.Server(g, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(g.cfg.Edge.Listener(ln))
	}()
	stop := func() {
		http.DefaultClient.CloseIdleConnections()
		srv.Close()
		<-done
	}
	t.Cleanup(func() {
		stop()
		g.Close()
	})
	return &testServer{URL: "http://" + ln.Addr().String(), stop: stop}, g, reg
}

func do(t *testing.T, method, url, token string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Proxy-Authorization", "secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestConfigFailClosed(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{MetricsToken: "m"}, "no inference token"},
		{Config{Token: "t"}, "no metrics token"},
		{Config{Token: "t", MetricsToken: "t"}, "distinct"},
		{Config{Token: "t", MetricsToken: "m", Upstreams: []Upstream{{ID: "A", URI: "/a", Addr: "127.0.0.1:1"}, {ID: "A", URI: "/b", Addr: "127.0.0.1:2"}}}, "duplicate catalog id"},
		{Config{Token: "t", MetricsToken: "m", Upstreams: []Upstream{{ID: "A", URI: "/a", Addr: "127.0.0.1:1"}, {ID: "B", URI: "/a", Addr: "127.0.0.1:2"}}}, "duplicate server_uri"},
		{Config{Token: "t", MetricsToken: "m", Upstreams: []Upstream{{ID: "A", URI: "a", Addr: "127.0.0.1:1"}}}, "must start with /"},
	}
	for _, c := range cases {
		if _, err := New(c.cfg, logx.Discard(), nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want error containing %q", c.cfg, err, c.want)
		}
	}
}

func TestRoutesAndRewrite(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, Upstream{ID: "TESTMODEL", URI: "/mortred/test", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok})

	resp, body := do(t, "POST", gw.URL+"/v1/models/TESTMODEL/infer", tok, strings.NewReader(`{"images":["x"]}`))
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"path":"/mortred/test"`) || resp.Header.Get("X-Mortred-Model") != "TESTMODEL" {
		t.Fatalf("infer: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	if strings.Contains(string(body), "secret") {
		t.Fatal("hop-by-hop Proxy-Authorization reached the model")
	}
	resp, body = do(t, "POST", gw.URL+"/mortred/test", tok, strings.NewReader(`{}`))
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"path":"/mortred/test"`) {
		t.Fatalf("legacy: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, "POST", gw.URL+"/v1/models/TESTMODEL/jobs", tok, strings.NewReader(`{}`))
	if resp.StatusCode != 202 || resp.Header.Get("Location") != "/v1/models/TESTMODEL/jobs/j1" {
		t.Fatalf("jobs: %d %v", resp.StatusCode, resp.Header)
	}
	var job map[string]any
	if err := json.Unmarshal(body, &job); err != nil {
		t.Fatal(err)
	}
	if job["poll_url"] != "/v1/models/TESTMODEL/jobs/j1" || job["result_url"] != "/v1/models/TESTMODEL/jobs/j1/result" || job["extra"] == nil {
		t.Fatalf("job body not rewritten faithfully: %s", body)
	}
	for path, want := range map[string]string{
		"/v1/models/TESTMODEL/jobs/j1":                `"path":"/jobs/j1"`,
		"/v1/models/TESTMODEL/jobs/j1/wait?timeout=5": `"query":"timeout=5"`,
		"/v1/models/TESTMODEL/jobs/j1/result":         `"path":"/jobs/j1/result"`,
	} {
		resp, body = do(t, "GET", gw.URL+path, tok, nil)
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	_, body = do(t, "GET", gw.URL+"/v1/models/TESTMODEL/jobs/j1", tok, nil)
	if !strings.Contains(string(body), `/v1/models/TESTMODEL/jobs/j1`) {
		t.Errorf("job status poll_url not rewritten: %s", body)
	}
	for _, path := range []string{"/v1/models/TESTMODEL/infer", "/mortred/test"} {
		resp, body = do(t, "GET", gw.URL+path, tok, nil)
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || !strings.Contains(string(body), `"status":62`) {
			t.Errorf("GET %s: %d %v %s", path, resp.StatusCode, resp.Header, body)
		}
	}
	for _, path := range []string{"/v1/models/NOPE/infer", "/nope", "/welcome"} {
		resp, body = do(t, "POST", gw.URL+path, tok, strings.NewReader(`{}`))
		if resp.StatusCode != 404 || !strings.Contains(string(body), `"status":63`) {
			t.Errorf("POST %s: %d %s", path, resp.StatusCode, body)
		}
	}
	resp, _ = do(t, "POST", gw.URL+"/v1/models/TESTMODEL/infer", tok, nil)
	if resp.StatusCode != 200 {
		t.Errorf("empty body: %d", resp.StatusCode)
	}
}

func TestPassThroughStatusAndRetryAfter(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, Upstream{ID: "B", URI: "/busy", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok})
	resp, body := do(t, "POST", gw.URL+"/v1/models/B/infer", tok, strings.NewReader(`{}`))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || string(body) != `{"status":429}` {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
}

func TestAuth(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, Upstream{ID: "A", URI: "/a", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok})
	resp, _ := do(t, "GET", gw.URL+"/healthz", "", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("healthz public: %d", resp.StatusCode)
	}
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"POST", "/v1/models/A/infer", "", 401},
		{"POST", "/v1/models/A/infer", "wrong", 401},
		{"POST", "/v1/models/A/infer", mtok, 401},
		{"POST", "/nope", "", 401}, // unknown paths do not reveal what exists
		{"GET", "/metrics", "", 401},
		{"GET", "/metrics", tok, 401},
		{"GET", "/metrics", mtok, 200},
		{"POST", "/v1/models/A/infer", tok, 200},
	} {
		resp, body := do(t, c.method, gw.URL+c.path, c.token, strings.NewReader("{}"))
		if resp.StatusCode != c.want {
			t.Errorf("%s %s token=%q: %d, want %d (%s)", c.method, c.path, c.token, resp.StatusCode, c.want, body)
		}
		if c.want == 401 && resp.Header.Get("WWW-Authenticate") != `Bearer realm="Mortred"` {
			t.Errorf("%s: missing WWW-Authenticate", c.path)
		}
	}
}

func TestUpstreamDown503(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connection refused
	gw, _, reg := newGateway(t, Upstream{ID: "DOWN", URI: "/down", Addr: addr})
	resp, body := do(t, "POST", gw.URL+"/v1/models/DOWN/infer", tok, strings.NewReader(`{}`))
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"status":65`) || !strings.Contains(string(body), "mortredctl start DOWN") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n := counter(t, reg, "mortred_gateway_upstream_errors_total", "refused", "DOWN"); n != 1 {
		t.Fatalf("refused counter = %v", n)
	}
}

func TestUpstreamReset502(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Read the request, then reset the connection mid-response.
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Le"))
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
		}
	}()
	gw, _, _ := newGateway(t, Upstream{ID: "RST", URI: "/rst", Addr: l.Addr().String()})
	resp, body := do(t, "POST", gw.URL+"/v1/models/RST/infer", tok, strings.NewReader(`{}`))
	if resp.StatusCode != 502 || !strings.Contains(string(body), "failed before answering") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestSizeLimit(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, Upstream{ID: "A", URI: "/a", Addr: strings.TrimPrefix(m.URL, "http://"), Token: modelTok})
	big := bytes.Repeat([]byte("x"), 2<<20)
	resp, body := do(t, "POST", gw.URL+"/v1/models/A/infer", tok, bytes.NewReader(big))
	if resp.StatusCode != 413 || !strings.Contains(string(body), `"status":61`) {
		t.Fatalf("declared: %d %s", resp.StatusCode, body)
	}
	// Undeclared length (chunked): cut at the limit while streaming.
	resp, body = do(t, "POST", gw.URL+"/v1/models/A/infer", tok, io.MultiReader(bytes.NewReader(big)))
	if resp.StatusCode != 413 {
		t.Fatalf("chunked: %d %s", resp.StatusCode, body)
	}
	// Under the limit, chunked bodies stream through whole.
	resp, body = do(t, "POST", gw.URL+"/v1/models/A/infer", tok, io.MultiReader(bytes.NewReader(big[:500<<10])))
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"len":512000`) {
		t.Fatalf("chunked under limit: %d %s", resp.StatusCode, body)
	}
}

func TestClientHangUpIsNot502(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer slow.Close()
	defer close(release)
	gw, _, reg := newGateway(t, Upstream{ID: "S", URI: "/s", Addr: strings.TrimPrefix(slow.URL, "http://")})
	client := &http.Client{Timeout: 200 * time.Millisecond}
	req, _ := http.NewRequest("POST", gw.URL+"/v1/models/S/infer", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+tok)
	if _, err := client.Do(req); err == nil {
		t.Fatal("expected client timeout")
	}
	deadline := time.Now().Add(10 * time.Second)
	for counter(t, reg, "mortred_gateway_client_closed_total", "S") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("client hang-up not counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := series(t, reg, "mortred_gateway_upstream_errors_total"); got != 0 {
		t.Fatalf("hang-up counted as upstream error (%d series)", got)
	}
}

// counter reads one labelled counter (label values in label-name order, as
// Gather sorts them), 0 when absent.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for i, l := range m.GetLabel() {
				if l.GetValue() != labels[i] {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// series counts the series of a metric family.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func TestForwardedFor(t *testing.T) {
	for _, c := range []struct{ remote, prior, want string }{
		{"203.0.113.7:5000", "", "203.0.113.7"},
		{"203.0.113.7:5000", "10.0.0.1", "10.0.0.1, 203.0.113.7"}, // a client's claim stays, the peer is last
		{"127.0.0.1:5000", "198.51.100.2", "198.51.100.2"},        // the local TLS edge already named the client
		{"127.0.0.1:5000", "", "127.0.0.1"},
	} {
		r := httptest.NewRequest("POST", "/x", nil)
		r.RemoteAddr = c.remote
		if c.prior != "" {
			r.Header.Set("X-Forwarded-For", c.prior)
		}
		if got := forwardedFor(r, netip.Addr.IsLoopback); got != c.want {
			t.Errorf("remote %s prior %q: %q, want %q", c.remote, c.prior, got, c.want)
		}
	}
}
