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
)

// TestFastMatchesPlain sends the same requests through the fast path and
// through net/http alone (ServeHTTP), to the same engine: the client gets
// the same status, body and fields, and the engine the same request.
func TestFastMatchesPlain(t *testing.T) {
	eng, got := recordingEngine(t)
	sse := newEngine(t, sseHandler(3, time.Millisecond, nil))
	fast, plain := newRouter(t, Config{MaxBody: 1 << 20}), newPlainRouter(t, Config{MaxBody: 1 << 20})
	for _, rt := range []*router{fast, plain} {
		rt.publish(t, map[string]string{"m": eng.base(), "s": sse.base()}, map[string]string{"down": "probe failed"})
	}
	cases := []struct{ path, ctype, auth, body string }{
		{"/v1/chat/completions", jsonCT, "Bearer k", `{"model":"m","messages":[]}`},
		{"/v1/completions?x=1&y=%20", jsonCT, "", `{"model":"m","prompt":"p"}`},
		{"/tokenize", jsonCT, "", `{"model":"m","prompt":"p"}`},
		{"/v1", "text/plain", "", `{"model":"m"}`},
		{"/v1/chat/completions", jsonCT, "", `{"model":"s","stream":true}`},
		{"/v1/chat/completions", jsonCT, "", `{"model":"nope"}`},
		{"/v1/chat/completions", jsonCT, "", `{"model":"down"}`},
		{"/v1/chat/completions", jsonCT, "", `{"prompt":"no model"}`},
		{"/v1/chat/completions", jsonCT, "", ``},
		{"/v1/chat/completions", "multipart/form-data; boundary=b", "", "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b--\r\n"},
	}
	for _, c := range cases {
		var answers [2]string
		for i, rt := range []*router{fast, plain} {
			req, _ := http.NewRequest(http.MethodPost, rt.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", c.ctype)
			req.Header.Set("Cookie", "secret=1")
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := rt.client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", c.path, c.body, err)
			}
			b := readAllString(t, resp.Body)
			resp.Body.Close()
			h := resp.Header
			answers[i] = fmt.Sprintf("%d %q ct=%q cc=%q xab=%q xe=%q te=%v cl=%d", resp.StatusCode, b, h.Get("Content-Type"),
				h.Get("Cache-Control"), h.Get("X-Accel-Buffering"), h.Get("X-Engine"), resp.TransferEncoding, resp.ContentLength)
			if h.Get("Date") == "" {
				t.Errorf("%s %s: no Date field", c.path, c.body)
			}
		}
		if answers[0] != answers[1] {
			t.Errorf("%s %s:\nfast  %s\nplain %s", c.path, c.body, answers[0], answers[1])
		}
	}
	seen := got()
	if len(seen)%2 != 0 {
		t.Fatalf("engine saw %d requests", len(seen))
	}
	for i := 0; i < len(seen); i += 2 {
		a, b := seen[i], seen[i+1]
		if a.uri != b.uri || a.body != b.body || fmt.Sprint(a.header) != fmt.Sprint(b.header) {
			t.Errorf("engine saw different requests:\nfast  %s %v %q\nplain %s %v %q", a.uri, a.header, a.body, b.uri, b.header, b.body)
		}
		if a.header.Get("Cookie") != "" {
			t.Errorf("cookie forwarded: %v", a.header)
		}
	}
}

// TestFastHandsOverMidConnection: on one connection, a request the fast
// path serves, one it leaves to net/http (a GET), and a POST after it,
// which net/http now serves: every answer arrives, in order.
func TestFastHandsOverMidConnection(t *testing.T) {
	eng, got := recordingEngine(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	c := rt.dial(t)
	post := "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"model\":\"m\"}"
	get := "GET /v1/completions HTTP/1.1\r\nHost: r\r\n\r\n"
	// Written at once: the fast path finds the rest buffered behind the
	// first request, and net/http must get those bytes.
	if _, err := io.WriteString(c, post+get+post); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i, want := range []int{200, 405, 200} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("answer %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	if n := len(got()); n != 2 {
		t.Fatalf("engine saw %d requests, want 2", n)
	}
}

// TestFastConnectionClose: a client asking to close gets its answer with
// Connection: close, then EOF.
func TestFastConnectionClose(t *testing.T) {
	eng, _ := recordingEngine(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	c := rt.dial(t)
	io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nConnection: close\r\nContent-Length: 13\r\n\r\n{\"model\":\"m\"}")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readAllString(t, resp.Body)
	if resp.StatusCode != 200 || !resp.Close || !strings.Contains(body, "cmpl-1") {
		t.Fatalf("status %d, close %v, body %q", resp.StatusCode, resp.Close, body)
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("connection still open after Connection: close (%d, %v)", n, err)
	}
}

// TestFastShortBody: a body shorter than its Content-Length, then a
// half-close, is a 400 and the connection closes; the engine sees
// nothing.
func TestFastShortBody(t *testing.T) {
	eng, got := recordingEngine(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	c := rt.dial(t)
	io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 100\r\n\r\n{\"model\":\"m\"}")
	c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := decodeError(t, resp); resp.StatusCode != 400 || e.Error.Code != "unreadable_body" {
		t.Fatalf("status %d, error %+v", resp.StatusCode, e.Error)
	}
	if n := len(got()); n != 0 {
		t.Fatalf("engine saw %d requests", n)
	}
}
