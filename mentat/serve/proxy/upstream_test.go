package proxy

import (
	"bufio"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawEngine is an engine whose every byte of framing the test writes.
type rawEngine = testproc.RawServer

func newRawEngine(t *testing.T, answer func(w *bufio.Writer, r *http.Request, body string) bool) *rawEngine {
	return testproc.NewRawServer(t, answer)
}

func rawBase(e *rawEngine) string { return "http://" + e.Addr() + "/v1" }

func postOK(t *testing.T, rt *router, body string) (*http.Response, string) {
	t.Helper()
	resp := rt.post(t, "/v1/chat/completions", jsonCT, body)
	defer resp.Body.Close()
	got := readAllString(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	return resp, got
}

// TestUpstreamRequestOnTheWire: the request an engine reads is the one
// net/http would have sent: request line with the query, Host, the body's
// exact length, the fixed User-Agent and only the forwarded headers.
func TestUpstreamRequestOnTheWire(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	var gotBody string
	eng := newRawEngine(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		mu.Lock()
		got, gotBody = r, body
		mu.Unlock()
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		return true
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": rawBase(eng)}, nil)
	body := `{"model":"m","prompt":"` + strings.Repeat("x", 64<<10) + `"}` // over one transport write buffer
	for _, b := range []string{`{"model":"m"}`, body} {
		req, _ := http.NewRequest(http.MethodPost, rt.URL+"/v1/chat/completions?a=1&b=%2F", strings.NewReader(b))
		req.Header.Set("Content-Type", jsonCT)
		req.Header.Set("Authorization", "Bearer  sk-1 ")
		req.Header.Add("Accept", "text/event-stream")
		req.Header.Add("Accept", "application/json")
		req.Header.Set("X-Private", "1")
		resp, err := rt.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAllString(t, resp.Body)
		resp.Body.Close()
		mu.Lock()
		r := got
		if resp.StatusCode != 200 || r == nil || gotBody != b {
			t.Fatalf("status %d, body intact %v", resp.StatusCode, gotBody == b)
		}
		if r.RequestURI != "/v1/chat/completions?a=1&b=%2F" || r.Host != eng.Addr() ||
			r.ContentLength != int64(len(b)) || r.Header.Get("User-Agent") != "mentatd-serve" ||
			r.Header.Get("Authorization") != "Bearer  sk-1" || len(r.Header.Values("Accept")) != 2 ||
			r.Header.Get("X-Private") != "" || r.Header.Get("Content-Type") != jsonCT {
			t.Fatalf("engine read %s %s Host %q length %d header %v", r.Method, r.RequestURI, r.Host, r.ContentLength, r.Header)
		}
		mu.Unlock()
	}
}

// TestUpstreamConnectionReuse: sequential requests share one pooled
// connection.
func TestUpstreamConnectionReuse(t *testing.T) {
	eng := newRawEngine(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": rawBase(eng)}, nil)
	for range 20 {
		if _, got := postOK(t, rt, `{"model":"m"}`); got != "ok" {
			t.Fatalf("body %q", got)
		}
	}
	if n := eng.Conns(); n != 1 {
		t.Fatalf("20 sequential requests used %d upstream connections, want 1", n)
	}
}

// TestUpstreamFraming: every way an HTTP/1.1 answer can be delimited is
// relayed whole, and a connection is only reused when its answer ended
// cleanly: not after a close-delimited body, a Connection: close, or
// bytes the engine sent past the end of its answer.
func TestUpstreamFraming(t *testing.T) {
	cases := []struct {
		name, wire, body string
		reusable         bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", "hello", true},
		{"interim", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"empty 204", "HTTP/1.1 204 No Content\r\n\r\n", "", true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"close-delimited", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello", "hello", false},
		{"stray bytes", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n", "hello", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int64
			eng := newRawEngine(t, func(w *bufio.Writer, r *http.Request, body string) bool {
				if n.Add(1) == 1 {
					io.WriteString(w, c.wire)
					return !strings.Contains(c.wire, "close")
				}
				io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
				return true
			})
			rt := newRouter(t, Config{})
			rt.publish(t, map[string]string{"m": rawBase(eng)}, nil)
			resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
			got := readAllString(t, resp.Body)
			resp.Body.Close()
			if got != c.body || resp.StatusCode/100 != 2 {
				t.Fatalf("first answer %d %q, want %q", resp.StatusCode, got, c.body)
			}
			if _, got := postOK(t, rt, `{"model":"m"}`); got != "second" {
				t.Fatalf("second answer %q", got)
			}
			want := int64(2)
			if c.reusable {
				want = 1
			}
			if conns := eng.Conns(); conns != want {
				t.Fatalf("two requests used %d connections, want %d", conns, want)
			}
		})
	}
}

// TestUpstreamIdleConnectionsClosed: the router closes an idle upstream
// connection itself, before the engines' 5 s keep-alive, even when the
// engine would keep it for a minute and no request comes to notice it.
func TestUpstreamIdleConnectionsClosed(t *testing.T) {
	var closed atomic.Int64
	eng := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	eng.Config.IdleTimeout = time.Minute
	eng.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	eng.Start()
	defer eng.Close()
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.URL + "/v1"}, nil)
	postOK(t, rt, `{"model":"m"}`)
	idleFrom := time.Now()
	eventually(t, "the router to close its idle upstream connection", func() bool { return closed.Load() == 1 })
	if d := time.Since(idleFrom); d >= 5*time.Second {
		t.Fatalf("idle upstream connection closed after %v, want below the engines' 5 s keep-alive", d)
	}
	// The pool still works after the sweep.
	postOK(t, rt, `{"model":"m"}`)
}
