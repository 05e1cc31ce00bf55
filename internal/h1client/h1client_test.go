package h1client

import (
	"bufio"
	"context"
	"errors"
	"github.com/fe64bb06/frontdoor/internal/testproc"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawServer is a server whose every byte of framing the test writes.
type rawServer = testproc.RawServer

func newRawServer(t *testing.T, answer func(w *bufio.Writer, r *http.Request, body string) bool) *rawServer {
	return testproc.NewRawServer(t, answer)
}

func srvURL(t *testing.T, s *rawServer, path string) *url.URL {
	return mustURL(t, "http://"+s.Addr()+path)
}

func newClient(t *testing.T, opts Options) *Client {
	c := New(opts)
	t.Cleanup(c.CloseIdle)
	return c
}

// do sends req and reads the whole answer.
func do(t *testing.T, c *Client, req *Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.RoundTrip(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestRequestOnTheWire: the request a server reads is the one net/http
// would have sent: request line with the query, Host, the body's exact
// length, the User-Agent and only the headers asked for.
func TestRequestOnTheWire(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	var gotBody string
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		mu.Lock()
		got, gotBody = r, body
		mu.Unlock()
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	c := newClient(t, Options{UserAgent: "tester"})
	in := http.Header{
		"Content-Type":  {"application/json"},
		"Authorization": {"Bearer  sk-1 "},
		"Accept":        {"text/event-stream", "application/json"},
		"X-Private":     {"1"},
		"Host":          {"evil"},
	}
	keys := []string{"Content-Type", "Accept", "Authorization"}
	large := strings.Repeat("x", maxInlineBody+1) // writev
	for _, tc := range []struct {
		method, body string
		keys         []string
		wantLen      int64
		private      string
	}{
		{"", `{"a":1}`, keys, 7, ""},
		{http.MethodPost, large, keys, int64(len(large)), ""},
		{http.MethodPost, "", keys, 0, ""},
		{http.MethodPut, "x", nil, 1, "1"},
		{http.MethodGet, "", nil, 0, "1"},
	} {
		target := srvURL(t, srv, "/v1/x?a=1&b=%2F")
		resp, answer := do(t, c, &Request{Method: tc.method, Target: target, Header: in, Keys: tc.keys, Body: []byte(tc.body)})
		mu.Lock()
		r, body := got, gotBody
		mu.Unlock()
		want := tc.method
		if want == "" {
			want = http.MethodPost
		}
		if resp.StatusCode != 200 || answer != "ok" || r.Method != want || body != tc.body {
			t.Fatalf("%s: status %d %q, server read %s, body intact %v", want, resp.StatusCode, answer, r.Method, body == tc.body)
		}
		_, hasLen := r.Header["Content-Length"]
		if tc.method == http.MethodGet && hasLen {
			t.Errorf("GET without a body sent Content-Length")
		}
		if r.RequestURI != "/v1/x?a=1&b=%2F" || r.Host != srv.Addr() ||
			r.ContentLength != tc.wantLen || r.Header.Get("User-Agent") != "tester" ||
			r.Header.Get("Authorization") != "Bearer  sk-1" || len(r.Header.Values("Accept")) != 2 ||
			r.Header.Get("X-Private") != tc.private || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("server read %s %s Host %q length %d header %v", r.Method, r.RequestURI, r.Host, r.ContentLength, r.Header)
		}
	}
	if n := srv.Conns(); n != 1 {
		t.Fatalf("%d sequential requests used %d connections, want 1", 5, n)
	}
}

// TestFraming: every way an HTTP/1.1 answer can be delimited is read
// whole, and a connection is only reused when its answer ended cleanly:
// not after a close-delimited body, a Connection: close, or bytes the
// server sent past the end of its answer.
func TestFraming(t *testing.T) {
	cases := []struct {
		name, method, wire, body string
		reusable                 bool
	}{
		{"length", "", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"chunked", "", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", "hello", true},
		{"interim", "", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"empty 204", "", "HTTP/1.1 204 No Content\r\n\r\n", "", true},
		{"head", http.MethodHead, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "", true},
		{"connection close", "", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"close-delimited", "", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello", "hello", false},
		{"stray bytes", "", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n", "hello", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
				if n.Add(1) == 1 {
					io.WriteString(w, tc.wire)
					return !strings.Contains(tc.wire, "close")
				}
				io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
				return true
			})
			c := newClient(t, Options{})
			resp, got := do(t, c, &Request{Method: tc.method, Target: srvURL(t, srv, "/")})
			if got != tc.body || resp.StatusCode/100 != 2 {
				t.Fatalf("first answer %d %q, want %q", resp.StatusCode, got, tc.body)
			}
			if _, got := do(t, c, &Request{Target: srvURL(t, srv, "/")}); got != "second" {
				t.Fatalf("second answer %q", got)
			}
			want := int64(2)
			if tc.reusable {
				want = 1
			}
			if conns := srv.Conns(); conns != want {
				t.Fatalf("two requests used %d connections, want %d", conns, want)
			}
		})
	}
}

// TestClosedIdleConnectionNotWritten: a connection the server closed
// while it sat in the pool is noticed before reuse; the request goes out
// once, on a new connection, and succeeds.
func TestClosedIdleConnectionNotWritten(t *testing.T) {
	var requests atomic.Int64
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		requests.Add(1)
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return false // closes without saying so
	})
	c := newClient(t, Options{})
	for i := range 5 {
		if _, got := do(t, c, &Request{Target: srvURL(t, srv, "/")}); got != "ok" {
			t.Fatalf("request %d: %q", i, got)
		}
		eventually(t, "the server's close to reach the pooled connection", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, l := range c.idle {
				for _, pc := range l {
					if connAlive(pc.nc) {
						return false
					}
				}
			}
			return true
		})
	}
	if n := requests.Load(); n != 5 {
		t.Fatalf("server saw %d requests for 5 sent", n)
	}
}

// TestIdleConnectionsClosed: the client closes an idle connection itself
// after IdleTimeout, with no request coming to notice it, and the pool
// works after the sweep.
func TestIdleConnectionsClosed(t *testing.T) {
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Config.IdleTimeout = time.Minute
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newClient(t, Options{IdleTimeout: 200 * time.Millisecond})
	target := mustURL(t, srv.URL+"/")
	do(t, c, &Request{Target: target})
	eventually(t, "the idle connection to be closed", func() bool { return closed.Load() == 1 })
	do(t, c, &Request{Target: target})
	c.CloseIdle()
	eventually(t, "CloseIdle to close the connection", func() bool { return closed.Load() == 2 })
}

// TestErrorsKeepTheirCause: a refused dial is still ECONNREFUSED to the
// caller, and a request whose context ends returns at once with the
// context's error.
func TestErrorsKeepTheirCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, Options{})
	_, err = c.RoundTrip(context.Background(), &Request{Target: mustURL(t, "http://"+addr+"/")})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial to a closed port: %v, want ECONNREFUSED", err)
	}

	release := make(chan struct{})
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		<-release
		return false
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = c.RoundTrip(ctx, &Request{Target: srvURL(t, srv, "/")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v, want context.Canceled", err)
	}
}

// TestRequestHead: the head is exact; names and values net/http would
// refuse to send are refused, never written.
func TestRequestHead(t *testing.T) {
	c := New(Options{UserAgent: "ua"})
	for _, h := range []http.Header{{"Authorization": {"a\x01b"}}, {"Bad Name": {"x"}}, {"X": {"a\r\nInjected: 1"}}} {
		if _, err := c.requestHead(http.MethodPost, &Request{Target: mustURL(t, "http://127.0.0.1:1/v1/x"), Header: h}); err == nil {
			t.Fatalf("header %q accepted", h)
		}
	}
	bp, err := c.requestHead(http.MethodPost, &Request{Target: mustURL(t, "http://[fe80::1%25eth0]:8000/v1/x?q=1"),
		Header: http.Header{"Accept": {"*/*"}, "X": {"no"}}, Keys: []string{"Accept", "Missing"}, Body: []byte("abc")})
	if err != nil {
		t.Fatal(err)
	}
	want := "POST /v1/x?q=1 HTTP/1.1\r\nHost: [fe80::1]:8000\r\nUser-Agent: ua\r\nAccept: */*\r\nContent-Length: 3\r\n\r\n"
	if got := string(*bp); got != want {
		t.Fatalf("head\n%q\nwant\n%q", got, want)
	}
	putHead(bp)
	for in, want := range map[string]string{"h:80": "h:80", "h": "h:80", "h:": "h:80", "[::1]": "[::1]:80", "[::1]:9": "[::1]:9"} {
		if got := DialAddr(in); got != want {
			t.Errorf("DialAddr(%q) = %q, want %q", in, got, want)
		}
	}
	if c.Handles(mustURL(t, "https://h/")) || c.Handles(mustURL(t, "http://bücher.example/")) || !c.Handles(mustURL(t, "http://h:1/")) {
		t.Error("Handles: https and IDNA hosts are for a Transport, plain http for the client")
	}
}

// FuzzRequestHead: whatever header a caller passes, the head written is
// either refused or parses back as one request with that header.
func FuzzRequestHead(f *testing.F) {
	f.Add("Accept", "*/*", "/v1/x?q=1")
	f.Add("X-Request-ID", " a b ", "/")
	f.Add("Bad:Name", "v", "/%2F")
	f.Add("X", "a\r\nB: c", "/")
	f.Add("X", "\x7f", "")
	c := New(Options{})
	f.Fuzz(func(t *testing.T, k, v, path string) {
		target := &url.URL{Scheme: "http", Host: "127.0.0.1:8000", Path: "/" + path}
		bp, err := c.requestHead(http.MethodPost, &Request{Target: target, Header: http.Header{k: {v}}, Body: []byte("b")})
		if err != nil {
			return
		}
		defer putHead(bp)
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(*bp) + "b")))
		if err != nil {
			t.Fatalf("head %q does not parse: %v", *bp, err)
		}
		if r.ContentLength != 1 || r.Host != "127.0.0.1:8000" {
			t.Fatalf("head %q read as length %d host %q", *bp, r.ContentLength, r.Host)
		}
		switch http.CanonicalHeaderKey(k) {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding":
			return
		}
		if got := r.Header[http.CanonicalHeaderKey(k)]; len(got) != 1 || got[0] != strings.Trim(v, " \t") {
			t.Fatalf("header %q: %q read back as %q", k, v, got)
		}
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
