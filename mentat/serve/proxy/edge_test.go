package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// Regression tests for the defects the one-stack change fixed, on real
// sockets: raw client bytes to the router, raw engines that send bad
// answers.

func rawPost(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}

// TestStrayCRLFBetweenPosts: old clients send CRLF after a POST body; the
// next POST on the connection is served (net/http skips it after a POST).
func TestStrayCRLFBetweenPosts(t *testing.T) {
	eng, _ := recordingEngine(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	c := rt.dial(t)
	io.WriteString(c, rawPost("/v1/chat/completions", `{"model":"m"}`)+"\r\n"+rawPost("/v1/chat/completions", `{"model":"m"}`))
	br := bufio.NewReader(c)
	for i := range 2 {
		if resp, body := testproc.ReadResponse(t, br); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if n := eng.requests.Load(); n != 2 {
		t.Fatalf("engine got %d requests, want 2", n)
	}
}

// TestSlowBodyCut: a body trickled slower than SERVE_BODY_TIMEOUT_S
// allows is refused with 408 and the connection closed; the engine is
// never called.
func TestSlowBodyCut(t *testing.T) {
	eng, _ := recordingEngine(t)
	rt := newRouter(t, Config{Edge: httpx.Limits{BodyTimeout: 300 * time.Millisecond}})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	c := rt.dial(t)
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 1000\r\n\r\n{\"model\":\"m\"")
	defer testproc.Trickle(c, []byte(strings.Repeat(" ", 100)), 100*time.Millisecond)() // at most 10 s
	br := bufio.NewReader(c)
	resp, body := testproc.ReadResponse(t, br)
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || !strings.Contains(body, "body_timeout") {
		t.Fatalf("%d close=%v %s", resp.StatusCode, resp.Close, body)
	}
	// And the connection really ends, while the client still trickles
	// (the router does not wait for the rest of the body).
	testproc.ReadClosed(t, br)
	if n := eng.requests.Load(); n != 0 {
		t.Fatalf("engine called %d times for a body that never came", n)
	}
}

// TestBareLFAnswer: an engine answering with bare-LF line ends and
// keeping its connection open is read as net/http reads it: the client
// gets the answer at once, not at SERVING_TIMEOUT_S.
func TestBareLFAnswer(t *testing.T) {
	eng := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 2\n\n{}")
		_, _ = br.ReadByte() // hold the connection open until the router closes it
	})
	rt := newRouter(t, Config{Timeout: time.Hour})
	rt.publish(t, map[string]string{"m": "http://" + eng.Addr() + "/v1"}, nil)
	c := rt.dial(t)
	io.WriteString(c, rawPost("/v1/chat/completions", `{"model":"m"}`))
	if resp, body := testproc.ReadResponse(t, bufio.NewReader(c)); resp.StatusCode != 200 || body != "{}" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// TestHugeAnswerHeadIs502: an engine answering with a 64 MiB head gets
// the client a 502; the router reads no more than its head limit (the
// engine only gets as far as the socket buffers let it).
func TestHugeAnswerHeadIs502(t *testing.T) {
	eng := testproc.NewHugeHeadServer(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": "http://" + eng.Addr() + "/v1"}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	if e := decodeError(t, resp); resp.StatusCode != http.StatusBadGateway || e.Error.Code != "upstream_error" {
		t.Fatalf("%d %+v", resp.StatusCode, e.Error)
	}
	if w := eng.Wrote(); w >= testproc.HugeHead {
		t.Fatalf("the engine wrote all %d MiB of its head: the router read it", w>>20)
	}
}

// TestGzipChunkedAnswerIs502: Transfer-Encoding "gzip, chunked" is a
// transfer coding net/http does not decode; the client gets 502, never
// the gzip bytes as if they were the identity body.
func TestGzipChunkedAnswerIs502(t *testing.T) {
	eng := newRawEngine(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"+
			"5\r\n\x1f\x8b\x08\x00\x00\r\n0\r\n\r\n")
		return true
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": rawBase(eng)}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	if e := decodeError(t, resp); resp.StatusCode != http.StatusBadGateway || e.Error.Code != "upstream_error" {
		t.Fatalf("%d %+v", resp.StatusCode, e.Error)
	}
}

// TestSwitchingProtocolsIs502: no request asks to switch protocols (the
// router forwards no Upgrade), so a 101 answer is an engine failure.
func TestSwitchingProtocolsIs502(t *testing.T) {
	eng := newRawEngine(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: evil\r\n\r\nraw bytes")
		return false
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": rawBase(eng)}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	if e := decodeError(t, resp); resp.StatusCode != http.StatusBadGateway || e.Error.Code != "upstream_error" {
		t.Fatalf("%d %+v", resp.StatusCode, e.Error)
	}
}

// TestContentEncodedAnswerPassesVerbatim: an answer the engine compressed
// itself reaches the client byte for byte with its Content-Encoding (the
// Transport does not decompress).
func TestContentEncodedAnswerPassesVerbatim(t *testing.T) {
	const gz = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
	eng := newRawEngine(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s", len(gz), gz)
		return true
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": rawBase(eng)}, nil)
	c := rt.dial(t)
	io.WriteString(c, rawPost("/v1/chat/completions", `{"model":"m"}`))
	resp, body := testproc.ReadResponse(t, bufio.NewReader(c))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" || body != gz {
		t.Fatalf("%d %v %q", resp.StatusCode, resp.Header, body)
	}
}

// TestHalfCloseNeverFabricatesSuccess: a client that half-closes after
// its request looks gone to net/http, which cancels the request. Nothing
// was served, so the client must not read a 2xx: the router cuts the
// connection (and counts 499).
func TestHalfCloseNeverFabricatesSuccess(t *testing.T) {
	called := make(chan struct{}, 1)
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		called <- struct{}{}
		<-r.Context().Done() // answers only after the router gave up
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	c := rt.dial(t)
	io.WriteString(c, rawPost("/v1/chat/completions", `{"model":"m"}`))
	<-called
	if got := testproc.HalfCloseAnswer(t, c); strings.HasPrefix(got, "HTTP/1.1 2") {
		t.Fatalf("client read a success for work not done: %q", got)
	}
	eventually(t, "a 499 to be counted", func() bool { return counter(t, rt.reg, "m", "499") == 1 })
}

// TestConnectionNamedAnswerHeaders: a field the engine names in its
// Connection header is hop-by-hop and does not reach the client (the
// request direction is in TestHeaderFilteringEndToEnd).
func TestConnectionNamedAnswerHeaders(t *testing.T) {
	eng := newRawEngine(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nConnection: X-Hop, keep-alive\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\n{}")
		return true
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": rawBase(eng)}, nil)
	c := rt.dial(t)
	io.WriteString(c, rawPost("/v1/chat/completions", `{"model":"m"}`))
	resp, _ := testproc.ReadResponse(t, bufio.NewReader(c))
	if resp.Header.Get("X-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Kept") != "1" {
		t.Fatalf("client headers %v", resp.Header)
	}
}
