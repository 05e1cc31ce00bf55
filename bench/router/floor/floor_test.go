package floor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
	"github.com/fe64bb06/frontdoor/internal/httpx"
)

// proxyTo serves the floor in front of upstream on a loopback socket.
func proxyTo(t *testing.T, upstream string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	p := httptest.NewServer(Handler(u, tr))
	t.Cleanup(p.Close)
	return p
}

// The engine sees the client's method, path, query, headers and body
// (hop-by-hop fields dropped); the client sees the engine's status,
// headers and body.
func TestForwardsRequestAndAnswer(t *testing.T) {
	type seen struct {
		method, uri, body, ctype, keepAlive string
		length                              int64
	}
	got := make(chan seen, 1)
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, string(b), r.Header.Get("Content-Type"), r.Header.Get("Keep-Alive"), r.ContentLength}
		w.Header().Set("X-Engine", "yes")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"answer":"`+strings.Repeat("a", 100<<10)+`"}`)
	}))
	defer eng.Close()
	p := proxyTo(t, eng.URL)

	body := `{"model":"m","padding":"` + strings.Repeat("x", 300<<10) + `"}`
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/chat/completions?x=1", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Keep-Alive", "timeout=5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.method != http.MethodPost || s.uri != "/v1/chat/completions?x=1" || s.body != body || s.length != int64(len(body)) ||
		s.ctype != "application/json" || s.keepAlive != "" {
		t.Fatalf("engine saw %s %s, Content-Type %q, Keep-Alive %q, Content-Length %d, body of %d bytes (want %d)",
			s.method, s.uri, s.ctype, s.keepAlive, s.length, len(s.body), len(body))
	}
	want := `{"answer":"` + strings.Repeat("a", 100<<10) + `"}`
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Engine") != "yes" || string(b) != want {
		t.Fatalf("client got %d, X-Engine %q, %d bytes (want 201, yes, %d bytes)", resp.StatusCode, resp.Header.Get("X-Engine"), len(b), len(want))
	}
}

// A stream's frame reaches the client while the engine still holds the
// stream open: the engine sends its second frame only after the client
// has read the first, so a proxy that buffered would never finish. The
// first frame is several times the event relay buffer: every piece of it
// is flushed, not only the first.
func TestStreamFramesFlushed(t *testing.T) {
	read := make(chan struct{})
	closed := false
	first := "data: " + strings.Repeat("1", 5*httpx.EventBufSize) + "\n"
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, first+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-read:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer eng.Close()
	p := proxyTo(t, eng.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for _, want := range []string{first, "\n", "data: [DONE]\n", "\n"} {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading %q: %v (a frame was held back)", want, err)
		}
		if line != want {
			t.Fatalf("got %.40q (%d bytes), want %.40q (%d bytes)", line, len(line), want, len(want))
		}
		if want == "\n" && !closed {
			close(read)
			closed = true
		}
	}
}

// No engine behind the proxy: 502, never a success.
func TestUpstreamDownIs502(t *testing.T) {
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := proxyTo(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	resp, err := http.Post(p.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
}

// An engine that dies in the middle of a chunked answer: the client's
// read fails instead of ending as if the answer were complete (net/http
// would close a chunked answer cleanly when the handler returns, so the
// floor must abort the connection itself).
func TestTruncatedAnswerIsCut(t *testing.T) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("a", 64<<10))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer eng.Close()
	p := proxyTo(t, eng.URL)
	resp, err := http.Post(p.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if len(b) == 0 {
		t.Fatalf("no byte of the answer arrived (%v): the test wants the cut after the status went out", err)
	}
	if err == nil {
		t.Fatalf("read %d bytes and no error: a cut answer looked complete", len(b))
	}
}

func TestParseRoute(t *testing.T) {
	rt, err := ParseRoute("127.0.0.1:9001=http://127.0.0.1:8001")
	if err != nil || rt.Listen != "127.0.0.1:9001" || rt.Upstream.String() != "http://127.0.0.1:8001" {
		t.Fatalf("got %+v, %v", rt, err)
	}
	for _, bad := range []string{"", "127.0.0.1:9001", "=http://h:1", "a=https://h:1", "a=http://", "a=http://h:1/v1", "a=%zz"} {
		if _, err := ParseRoute(bad); err == nil {
			t.Errorf("ParseRoute(%q) accepted", bad)
		}
	}
}

// Serve answers on every route and returns nil once its context ends.
func TestServeRoutes(t *testing.T) {
	engA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "A") }))
	defer engA.Close()
	engB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "B") }))
	defer engB.Close()
	var routes []Route
	var listens []string
	for _, up := range []string{engA.URL, engB.URL} {
		port, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		listens = append(listens, fmt.Sprintf("127.0.0.1:%d", port))
		rt, err := ParseRoute(listens[len(listens)-1] + "=" + up)
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, rt)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, routes) }()
	for i, want := range []string{"A", "B"} {
		var b []byte
		err := harness.Eventually(ctx, 10*time.Second, "floor on "+listens[i], func() error {
			resp, err := http.Post("http://"+listens[i]+"/x", "text/plain", strings.NewReader("q"))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, err = io.ReadAll(resp.Body)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Fatalf("route %d answered %q, want %q", i, b, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
