package h1server

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHandover: the first request the fast path does not take, and every
// later one on its connection, reach the fallback with their bytes
// intact.
func TestHandover(t *testing.T) {
	big := "X-Big: " + strings.Repeat("b", 5000)
	tests := []struct {
		name    string
		first   string
		wantTgt string
		body    string
	}{
		{"GET", get("/fast/get?x=1"), "GET /fast/get?x=1", ""},
		{"POST elsewhere", post("/slow", "payload"), "POST /slow", "payload"},
		{"head over the buffer", post("/fast/big", "big-body", big), "POST /fast/big", "big-body"},
		{"chunked POST", "POST /fast/chunked HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
			"POST /fast/chunked", "abcdefg"},
		{"escaped path", post("/fast/a%2Fb", "esc"), "POST /fast/a%2Fb", "esc"},
		{"HTTP/1.0 keep-alive", "POST /fast HTTP/1.0\r\nHost: test\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nold",
			"POST /fast", "old"},
		// net/http reads a head with bare-LF line ends; it must reach it.
		{"bare LF head", "GET /lf HTTP/1.1\nHost: test\n\n", "GET /lf", ""},
		{"bare LF blank line", "POST /fast/lf HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\nlf", "POST /fast/lf", "lf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fast atomic.Int32
			ts := start(t, &handler{serve: func(x *Exchange) { fast.Add(1); echo(x) }}, nil)
			c := dial(t, ts.addr)
			c.send(tt.first)
			resp, body := c.read()
			expect(t, resp, body, "fallback", tt.body)
			if got := resp.Header.Get("X-Target"); got != tt.wantTgt {
				t.Fatalf("fallback saw %q, want %q", got, tt.wantTgt)
			}
			if resp.Close && strings.Contains(tt.first, "HTTP/1.1") {
				t.Fatal("fallback closed a keep-alive connection")
			}
			if resp.Close {
				return
			}
			// Later requests, fast ones too, stay with the fallback.
			for i := range 3 {
				c.send(post("/fast/after", "after"+strconv.Itoa(i)))
				resp, body = c.read()
				expect(t, resp, body, "fallback", "after"+strconv.Itoa(i))
			}
			if n := fast.Load(); n != 0 {
				t.Fatalf("fast path served %d requests of a handed-over connection", n)
			}
		})
	}
}

// TestHandoverExpect: net/http answers Expect: 100-continue itself, on
// the connection the fast path read the head from.
func TestHandoverExpect(t *testing.T) {
	ts := start(t, &handler{}, nil)
	c := dial(t, ts.addr)
	c.send("POST /fast HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	line, err := c.br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("got %q %v, want 100 Continue", line, err)
	}
	if blank, err := c.br.ReadString('\n'); err != nil || blank != "\r\n" {
		t.Fatalf("after 100: %q %v", blank, err)
	}
	c.send("hello")
	resp, body := c.read()
	expect(t, resp, body, "fallback", "hello")
}

// TestHandoverMalformed: the fallback answers what net/http refuses.
func TestHandoverMalformed(t *testing.T) {
	ts := start(t, &handler{}, nil)
	for _, raw := range []string{
		"POST /fast HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n",
		"POST /fast HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
		"POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"POST /fast HTTP/1.1\r\nHost: a\r\nX-A: b\x01\r\nContent-Length: 0\r\n\r\n",
		"POST /fast HTTP/1.1\r\nHost: a b\r\nContent-Length: 0\r\n\r\n",
		"POST /fast HTTP/1.1\r\nHost: a/b\r\nContent-Length: 0\r\n\r\n",
		"POST /fast HTTP/1.1\r\nHost: \xe9.example\r\nContent-Length: 0\r\n\r\n",
	} {
		c := dial(t, ts.addr)
		c.send(raw)
		resp, _, err := c.tryRead()
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%q: got %v %v, want 400 from net/http", raw, resp, err)
		}
	}
}

// TestHandoverAfterFast: a declined request after fast ones on the same
// connection, its bytes already in the read buffer, goes over whole.
func TestHandoverAfterFast(t *testing.T) {
	ts := start(t, &handler{}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast/1", "one") + post("/fast/2", "two") + get("/declined?q=1") + post("/fast/3", "three") +
		"POST /fast/4 HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nfour\r\n0\r\n\r\n")
	for _, want := range []struct{ served, body, target string }{
		{"fast", "one", ""}, {"fast", "two", ""},
		{"fallback", "", "GET /declined?q=1"}, {"fallback", "three", "POST /fast/3"}, {"fallback", "four", "POST /fast/4"},
	} {
		resp, body := c.read()
		expect(t, resp, body, want.served, want.body)
		if want.target != "" && resp.Header.Get("X-Target") != want.target {
			t.Fatalf("fallback saw %q, want %q", resp.Header.Get("X-Target"), want.target)
		}
	}
	// The same with the declined head split across writes: part of it
	// buffered by the fast path, the rest read by the fallback.
	c2 := dial(t, ts.addr)
	c2.send(post("/fast/1", "one") + "GET /split HTT")
	resp, body := c2.read()
	expect(t, resp, body, "fast", "one")
	c2.send("P/1.1\r\nHost: test\r\n\r\n")
	resp, body = c2.read()
	expect(t, resp, body, "fallback", "")
	if resp.Header.Get("X-Target") != "GET /split" {
		t.Fatalf("fallback saw %q", resp.Header.Get("X-Target"))
	}
}
