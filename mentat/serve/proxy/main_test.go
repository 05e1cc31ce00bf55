package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testproc.IgnoreRSTAvoidance) }

// engine is a fake vLLM: a real listener on 127.0.0.1 whose idle
// keep-alive connections close after about a second, like uvicorn's.
type engine struct {
	*httptest.Server
	requests atomic.Int64
	closed   atomic.Int64
}

func newEngine(t testing.TB, h http.HandlerFunc) *engine {
	t.Helper()
	e := &engine{}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		h(w, r)
	}))
	e.Config.IdleTimeout = time.Second
	e.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			e.closed.Add(1)
		}
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

// base is the engine's announced OpenAI base.
func (e *engine) base() string { return e.URL + "/v1" }

// router is a proxy behind a real listener, routing by a snapshot the test
// builds directly. It serves as the router binary does: net/http with the
// edge limits of cfg.Edge (httpx), the proxy as its handler.
type router struct {
	URL      string
	Listener net.Listener
	p        *Proxy
	holder   *routes.Holder
	reg      *prometheus.Registry
	client   *http.Client
}

func newRouter(t testing.TB, cfg Config) *router { return newRouterWith(t, cfg, nil) }

// newRouterWith lets the test configure the router's http.Server before it
// starts.
func newRouterWith(t testing.TB, cfg Config, configure func(*http.Server)) *router {
	t.Helper()
	rt := &router{holder: &routes.Holder{}, reg: prometheus.NewRegistry()}
	rt.p = New(rt.holder, cfg, logx.Discard(), rt.reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt.Listener = ln
	rt.URL = "http://" + ln.Addr().String()
	srv := cfg.Edge.Server(rt.p, nil)
	if configure != nil {
		configure(srv)
	}
	ln = cfg.Edge.Listener(ln)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	tr := &http.Transport{DisableCompression: true}
	rt.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		<-done
		rt.p.Close()
	})
	return rt
}

// dial opens a raw connection to the router, closed when the test ends;
// every read and write on it ends within 15 s.
func (rt *router) dial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", rt.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(15 * time.Second))
	return c
}

// publish stores a snapshot: model → engine base for routable models, plus
// groups that exist but are not admitted (group name → why_not).
func (rt *router) publish(t testing.TB, bases map[string]string, down map[string]string) {
	t.Helper()
	models := map[string]*routes.Route{}
	groups := map[string]*routes.Group{}
	for m, base := range bases {
		r, err := routes.NewRoute(m, "g-"+m, base, "vllm")
		if err != nil {
			t.Fatal(err)
		}
		models[m] = r
		groups["g-"+m] = &routes.Group{Name: "g-" + m, Healthy: true, OpenAI: base, Models: []string{m}}
	}
	for g, why := range down {
		groups[g] = &routes.Group{Name: g, Healthy: false, WhyNot: why}
	}
	rt.holder.Store(routes.New(time.Now(), models, groups, nil))
}

func (rt *router) post(t testing.TB, path, ctype, body string) *http.Response {
	t.Helper()
	resp, err := rt.client.Post(rt.URL+path, ctype, strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

func readAllString(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// eventually polls cond until it holds or the generous deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
