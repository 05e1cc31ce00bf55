package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// Regression tests for the gateway's edge, on real sockets: raw client
// bytes to the gateway, raw model servers that send bad answers.

func (s *testServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	return c
}

func rawInfer(id, extra, body string) string {
	return fmt.Sprintf("POST /v1/models/%s/infer HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s",
		id, tok, extra, len(body), body)
}

func modelAt(addr string) Upstream { return Upstream{ID: "M", URI: "/m", Addr: addr, Token: modelTok} }

// TestHeadTooLargeIs431: a request head over max_header_bytes gets a 431
// the client reads, not a reset.
func TestHeadTooLargeIs431(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGatewayWith(t, Config{Edge: httpx.Limits{MaxHeaderBytes: 8 << 10}}, modelAt(strings.TrimPrefix(m.URL, "http://")))
	c := gw.dial(t)
	io.WriteString(c, rawInfer("M", "X-Big: "+strings.Repeat("a", 64<<10)+"\r\n", "{}"))
	br := bufio.NewReader(c)
	resp, _ := testproc.ReadResponse(t, br)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

// TestEncodedBodyIs415: model servers decode no content coding, so a
// compressed body is refused at the gateway instead of reaching the model
// as if it were JSON.
func TestEncodedBodyIs415(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, modelAt(strings.TrimPrefix(m.URL, "http://")))
	c := gw.dial(t)
	io.WriteString(c, rawInfer("M", "Content-Encoding: gzip\r\n", "\x1f\x8b\x08\x00"))
	resp, body := testproc.ReadResponse(t, bufio.NewReader(c))
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(body, `"status":60`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	// identity is no coding at all.
	io.WriteString(c, rawInfer("M", "Content-Encoding: identity\r\n", "{}"))
	if resp, body := testproc.ReadResponse(t, bufio.NewReader(c)); resp.StatusCode != 200 {
		t.Fatalf("identity: %d %s", resp.StatusCode, body)
	}
}

// TestHalfCloseNeverFabricatesSuccess: a client that half-closes after
// its request is taken as gone; nothing was served, so it must not read a
// 2xx.
func TestHalfCloseNeverFabricatesSuccess(t *testing.T) {
	called := make(chan struct{}, 1)
	m := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		called <- struct{}{}
		_, _ = br.ReadByte() // no answer; wait for the gateway to give up
	})
	gw, _, reg := newGateway(t, modelAt(m.Addr()))
	c := gw.dial(t)
	io.WriteString(c, rawInfer("M", "", "{}"))
	<-called
	if got := testproc.HalfCloseAnswer(t, c); strings.HasPrefix(got, "HTTP/1.1 2") {
		t.Fatalf("client read a success for work not done: %q", got)
	}
	if n := counter(t, reg, "mortred_gateway_client_closed_total", "M"); n != 1 {
		t.Fatalf("client_closed %v, want 1", n)
	}
}

// TestConnectionNamedHeaders: fields named in a Connection header are
// hop-by-hop in both directions.
func TestConnectionNamedHeaders(t *testing.T) {
	var seen atomic.Value
	m := newRawModel(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		seen.Store(r.Header.Clone())
		io.WriteString(w, "HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: secret\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\n{}")
		return true
	})
	gw, _, _ := newGateway(t, modelAt(m.Addr()))
	c := gw.dial(t)
	io.WriteString(c, rawInfer("M", "Connection: X-Request-ID, Accept, x-forwarded-for\r\nX-Request-ID: r1\r\nAccept: application/json\r\nX-Forwarded-For: 6.6.6.6\r\n", "{}"))
	resp, _ := testproc.ReadResponse(t, bufio.NewReader(c))
	h, _ := seen.Load().(http.Header)
	if resp.StatusCode != 200 || h == nil {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The client's X-Forwarded-For was hop-by-hop: the model sees the
	// peer's address alone.
	if h.Get("X-Request-Id") != "" || h.Get("Accept") != "" || h.Get("Authorization") != "Bearer "+modelTok ||
		h.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Fatalf("model saw %v", h)
	}
	if resp.Header.Get("X-Hop") != "" || resp.Header.Get("X-Kept") != "1" {
		t.Fatalf("client got %v", resp.Header)
	}
}

func newRawModel(t *testing.T, answer func(w *bufio.Writer, r *http.Request, body string) bool) *testproc.RawServer {
	return testproc.NewRawServer(t, answer)
}

// TestBadAnswersAre502: a model answer head of 64 MiB, or a transfer
// coding net/http does not decode, is a 502 envelope; the head is not
// read past the limit.
func TestBadAnswersAre502(t *testing.T) {
	huge := testproc.NewHugeHeadServer(t)
	gzipChunked := newRawModel(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4\r\n\x1f\x8b\x08\x00\r\n0\r\n\r\n")
		return true
	})
	switching := newRawModel(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: evil\r\n\r\nraw bytes")
		return false
	})
	gw, _, _ := newGateway(t, Upstream{ID: "H", URI: "/h", Addr: huge.Addr()}, Upstream{ID: "G", URI: "/g", Addr: gzipChunked.Addr()},
		Upstream{ID: "S", URI: "/s", Addr: switching.Addr()})
	for _, id := range []string{"H", "G", "S"} {
		resp, body := do(t, "POST", gw.URL+"/v1/models/"+id+"/infer", tok, strings.NewReader(`{}`))
		var env struct{ Status int }
		_ = json.Unmarshal(body, &env)
		if resp.StatusCode != http.StatusBadGateway || env.Status != 500 {
			t.Fatalf("%s: %d %s", id, resp.StatusCode, body)
		}
	}
	if w := huge.Wrote(); w >= testproc.HugeHead {
		t.Fatalf("the model wrote all %d MiB of its head: the gateway read it", w>>20)
	}
}

// TestMalformedChunkedBodyIs400: a client's chunked body that does not
// parse is the client's fault (400), not the model server's (502).
func TestMalformedChunkedBodyIs400(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, modelAt(strings.TrimPrefix(m.URL, "http://")))
	for _, chunks := range []string{"fffffffffffffffffff\r\n{}\r\n0\r\n\r\n", "2\n{}\r\n0\r\n\r\n", "2\r\n{}\n0\r\n\r\n"} {
		c := gw.dial(t)
		fmt.Fprintf(c, "POST /v1/models/M/infer HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%s", tok, chunks)
		resp, body := testproc.ReadResponse(t, bufio.NewReader(c))
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%q: %d %s", chunks, resp.StatusCode, body)
		}
	}
}

// TestSlowBodyIs408: a body trickled past body_timeout_ms is refused with
// 408 and the connection closed, whether it is small (read whole first)
// or large (streamed to the model server).
func TestSlowBodyIs408(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGatewayWith(t, Config{Edge: httpx.Limits{BodyTimeout: 300 * time.Millisecond}}, modelAt(strings.TrimPrefix(m.URL, "http://")))
	for _, size := range []int{1000, maxSmallBody + 1} {
		c := gw.dial(t)
		fmt.Fprintf(c, "POST /v1/models/M/infer HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", tok, size)
		stop := testproc.Trickle(c, []byte(strings.Repeat(" ", 100)), 100*time.Millisecond) // at most 10 s
		br := bufio.NewReader(c)
		resp, body := testproc.ReadResponse(t, br)
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Fatalf("%d bytes: %d close=%v %s", size, resp.StatusCode, resp.Close, body)
		}
		// And the connection really ends while the client still trickles.
		testproc.ReadClosed(t, br)
		stop()
	}
}

// TestStrayCRLFBetweenPosts: CRLF after a POST body, then another POST on
// the same connection: both are served.
func TestStrayCRLFBetweenPosts(t *testing.T) {
	m := fakeModel(t)
	gw, _, _ := newGateway(t, modelAt(strings.TrimPrefix(m.URL, "http://")))
	c := gw.dial(t)
	io.WriteString(c, rawInfer("M", "", "{}")+"\r\n"+rawInfer("M", "", "{}"))
	br := bufio.NewReader(c)
	for i := range 2 {
		if resp, body := testproc.ReadResponse(t, br); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
}

// TestJobIDsStayOneSegment: a job id that decodes into a separator, a
// dot segment, a query, a fragment or a NUL is refused with 404; nothing
// reaches the model server (which would otherwise get another path with
// the model's token).
func TestJobIDsStayOneSegment(t *testing.T) {
	var seen atomic.Int64
	m := newRawModel(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		seen.Add(1)
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
		return true
	})
	gw, _, _ := newGateway(t, Upstream{ID: "J", URI: "/j", Addr: m.Addr(), Token: modelTok})
	for _, p := range []string{"..%2F..%2Fmetrics", "%2e%2e/result", "%2E/wait", "a%3Fb=c", "a%23b/wait", "x%00y", "a%2Fb"} {
		resp, body := do(t, http.MethodGet, gw.URL+"/v1/models/J/jobs/"+p, tok, nil)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"status":63`) {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("model server got %d requests for job ids that are not one segment", n)
	}
	if resp, body := do(t, http.MethodGet, gw.URL+"/v1/models/J/jobs/j-1_a.b~c/wait", tok, nil); resp.StatusCode != 200 || seen.Load() != 1 {
		t.Fatalf("plain id: %d %s", resp.StatusCode, body)
	}
}
