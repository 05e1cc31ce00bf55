package h1client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// readRawRequest reads one request as sent: its head through the blank
// line and the Content-Length bytes after it.
func readRawRequest(br *bufio.Reader) ([]byte, error) {
	var req []byte
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		req = append(req, line...)
		if string(line) == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(string(line), ":"); ok && strings.EqualFold(k, "Content-Length") {
			if n, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return nil, err
			}
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, err
	}
	return append(req, body...), nil
}

// drain reads until the client closes: a server that never answers.
func drain(br *bufio.Reader) { _, _ = io.Copy(io.Discard, br) }

// postHead is a request head for a body of n bytes.
func postHead(addr, path string, n int) []byte {
	return fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, n)
}

// call sends one request on x and reads the whole answer; x is closed.
func call(c *Client, x *Call, addr string, body string) (string, error) {
	defer x.Close()
	if err := c.Send(x, addr, postHead(addr, "/", len(body)), []byte(body)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(x)
	return string(b), err
}

// idleConns is how many connections the pool holds for addr.
func idleConns(c *Client, addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle[addr])
}

// countingConn counts the writes on a client's connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestCallRequestOnTheWire: the server reads head and body byte for byte
// as given; a small request goes out in one write, a large body intact.
func TestCallRequestOnTheWire(t *testing.T) {
	got := make(chan []byte, 1)
	srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := readRawRequest(br)
			if err != nil {
				return
			}
			got <- req
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	var writes atomic.Int64
	dialer := &net.Dialer{}
	c := newClient(t, Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{nc, &writes}, nil
	}})
	large := make([]byte, 3*maxInlineBody+17)
	for i := range large {
		large[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name      string
		head      string
		body      []byte
		oneWrite  bool
		wantConns int64
	}{
		{"small", "POST /v1/chat/completions?x=%2F HTTP/1.1\r\nHost: engine\r\nX-Odd:  spaced \t\r\nContent-Length: 7\r\n\r\n", []byte(`{"a":1}`), true, 1},
		{"empty", "POST /e HTTP/1.1\r\nHost: engine\r\nContent-Length: 0\r\n\r\n", nil, true, 1},
		{"inline limit", "POST /l HTTP/1.1\r\nHost: e\r\nContent-Length: 65536\r\n\r\n", large[:maxInlineBody], true, 1},
		{"large", "POST /big HTTP/1.1\r\nHost: e\r\nContent-Length: " + strconv.Itoa(len(large)) + "\r\n\r\n", large, false, 1},
	} {
		writes.Store(0)
		x := &Call{}
		if err := c.Send(x, srv.Addr(), []byte(tc.head), tc.body); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, err := io.ReadAll(x)
		x.Close()
		if err != nil || string(b) != "ok" || x.Status != 200 {
			t.Fatalf("%s: answer %d %q %v", tc.name, x.Status, b, err)
		}
		req := <-got
		if want := append([]byte(tc.head), tc.body...); !bytes.Equal(req, want) {
			t.Fatalf("%s: server read %d bytes, not the %d sent byte for byte", tc.name, len(req), len(want))
		}
		if n := writes.Load(); tc.oneWrite && n != 1 {
			t.Errorf("%s: request went out in %d writes, want 1", tc.name, n)
		}
	}
	if n := srv.Conns(); n != 1 {
		t.Fatalf("sequential Calls used %d connections, want 1", n)
	}
}

// TestCallFraming: every way a response can be delimited is read whole
// with the right status and length, and the connection is reused only
// after an answer that ended cleanly on a connection that may carry
// another.
func TestCallFraming(t *testing.T) {
	cases := []struct {
		name, wire, body string
		status           int
		length           int64
		reusable         bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", 200, 5, true},
		{"zero length", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", 200, 0, true},
		{"same length twice", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-length:5\r\n\r\nhello", "hello", 200, 5, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\n\r\n", "hello", 200, -1, true},
		{"chunked trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: 1\r\nX-More: 2\r\n\r\n", "hello", 200, -1, true},
		{"chunked big", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(strings.Repeat("0123456789", 2000), 4096), strings.Repeat("0123456789", 2000), 200, -1, true},
		{"http/1.0 until close", "HTTP/1.0 200 OK\r\n\r\nhello", "hello", 200, -1, false},
		{"http/1.1 until close", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello", "hello", 200, -1, false},
		{"http/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 5\r\n\r\nhello", "hello", 200, 5, true},
		{"http/1.0 length", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", 200, 5, false},
		{"http/1.0 chunked", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "hello", 200, -1, false},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 5\r\n\r\nhello", "hello", 200, 5, false},
		{"204", "HTTP/1.1 204 No Content\r\nX: y\r\n\r\n", "", 204, 0, true},
		{"304 with length", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "", 304, 0, true},
		{"both framings", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "hello", 200, -1, false},
		{"empty transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nContent-Length: 5\r\n\r\nhello", "hello", 200, -1, false},
		{"not chunked last", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\nhello", "hello", 200, -1, false},
		{"interim", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello", "hello", 201, 5, true},
		{"no reason", "HTTP/1.1 200\r\nContent-Length: 5\r\n\r\nhello", "hello", 200, 5, true},
		{"error status", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", "busy", 503, 4, true},
	}
	// The server closes the connection only where that ends the body:
	// elsewhere it is the client that must not reuse it.
	untilClose := map[string]bool{"http/1.0 until close": true, "http/1.1 until close": true,
		"empty transfer coding": true, "not chunked last": true}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
				if n.Add(1) == 1 {
					io.WriteString(w, tc.wire)
					return !untilClose[tc.name]
				}
				io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
				return true
			})
			c := newClient(t, Options{})
			x := &Call{}
			x.SetDeadline(time.Now().Add(20 * time.Second)) // nothing here may hang
			if err := c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 1), []byte("x")); err != nil {
				t.Fatal(err)
			}
			if x.Status != tc.status || x.ContentLength != tc.length {
				t.Fatalf("status %d length %d, want %d %d", x.Status, x.ContentLength, tc.status, tc.length)
			}
			b, err := io.ReadAll(x)
			x.Close()
			if err != nil || string(b) != tc.body {
				t.Fatalf("body %q %v, want %q", b, err, tc.body)
			}
			// The second answer on a reused connection is read past the
			// first's end: a framing off by one byte shows here.
			if got, err := call(c, x, srv.Addr(), ""); err != nil || got != "second" {
				t.Fatalf("second answer %q %v", got, err)
			}
			want := int64(2)
			if tc.reusable {
				want = 1
			}
			if conns := srv.Conns(); conns != want {
				t.Fatalf("two Calls used %d connections, want %d", conns, want)
			}
		})
	}
}

// chunked encodes s in chunks of n bytes.
func chunked(s string, n int) string {
	var b strings.Builder
	for len(s) > 0 {
		k := min(n, len(s))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", k, s[:k])
		s = s[k:]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// TestCallRefusesMalformed: a response the client cannot frame safely
// fails Send with an error that names what was wrong, and its connection
// is not kept.
func TestCallRefusesMalformed(t *testing.T) {
	cases := []struct {
		name, wire, want string
	}{
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", "invalid Content-Length"},
		{"length list", "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello", "invalid Content-Length"},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", "invalid Content-Length"},
		{"huge length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nhello", "invalid Content-Length"},
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "switched protocols"},
		{"too many interim", strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 6) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "too many interim"},
		{"http/2", "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"lowercase proto", "http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"four digits", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"two digits", "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"signed status", "HTTP/1.1 +20 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"status below 100", "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"letters", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"two spaces", "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"not http", "SSH-2.0-OpenSSH_9.6\r\n\r\n", "malformed status line"},
		{"status line bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", "malformed status line"},
		{"leading LF", "\n\r\n\r\n", "malformed status line"},
		{"empty head", "\r\n\r\n", "malformed status line"},
		{"header bare LF", "HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 0\r\n\r\n", "bare LF"},
		{"NUL in value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"NUL in name", "HTTP/1.1 200 OK\r\nX-\x00A: 1\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"CR in value", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello", "malformed response header line"},
		{"tab before colon", "HTTP/1.1 200 OK\r\nContent-Length\t: 5\r\n\r\nhello", "malformed response header line"},
		{"space in name", "HTTP/1.1 200 OK\r\nContent Length: 5\r\n\r\nhello", "malformed response header line"},
		{"control in value", "HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"DEL in value", "HTTP/1.1 200 OK\r\nX-A: a\x7fb\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"folded line", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"no colon", "HTTP/1.1 200 OK\r\nX-A\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"empty name", "HTTP/1.1 200 OK\r\n: a\r\nContent-Length: 0\r\n\r\n", "malformed response header line"},
		{"interim bare LF", "HTTP/1.1 103 Early Hints\r\nLink: </a>\nHTTP/1.1 200 OK\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "bare LF"},
		{"head over 4 KiB", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", bufSize) + "\r\nContent-Length: 0\r\n\r\n", "larger than 4096 bytes"},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Len", "EOF"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
				io.WriteString(w, tc.wire)
				return false
			})
			c := newClient(t, Options{})
			x := &Call{}
			x.SetDeadline(time.Now().Add(20 * time.Second))
			err := c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 0), nil)
			if err == nil {
				b, rerr := io.ReadAll(x)
				x.Close()
				t.Fatalf("accepted: status %d header %q body %q %v", x.Status, x.Header, b, rerr)
			}
			x.Close()
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			}
			if n := idleConns(c, srv.Addr()); n != 0 {
				t.Fatalf("%d connections pooled after a refused answer", n)
			}
		})
	}
}

// TestCallGet: field names match whatever their case, the first of
// several wins, and the value comes without surrounding whitespace.
func TestCallGet(t *testing.T) {
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\ncontent-TYPE:text/event-stream \r\nX-Multi: 1\r\nx-multi: 2\r\nX-Empty:\r\nX-Tab:\tv\t\r\nContent-Length: 0\r\n\r\n")
		return true
	})
	c := newClient(t, Options{})
	x := &Call{}
	defer x.Close()
	if err := c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 0), nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"Content-Type": "text/event-stream", "CONTENT-TYPE": "text/event-stream", "content-type": "text/event-stream",
		"X-Multi": "1", "X-Tab": "v", "Content-Length": "0",
	} {
		if got := x.Get(name); string(got) != want {
			t.Errorf("Get(%q) = %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"Missing", "Content", "Content-Type-X", "X-Empt", ""} {
		if got := x.Get(name); got != nil {
			t.Errorf("Get(%q) = %q, want nil", name, got)
		}
	}
	if got := x.Get("X-Empty"); len(got) != 0 {
		t.Errorf("Get(X-Empty) = %q, want empty", got)
	}
	if !bytes.HasSuffix(x.Header, []byte("Content-Length: 0\r\n")) || bytes.HasPrefix(x.Header, []byte("HTTP/")) {
		t.Errorf("Header %q: want the field lines only, each with its CRLF", x.Header)
	}
}

// TestCallPoolReuse: Calls one after another share one connection; a
// body not read to its end, or a Close before reading, spends it.
func TestCallPoolReuse(t *testing.T) {
	var requests atomic.Int64
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		requests.Add(1)
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789")
		return true
	})
	c := newClient(t, Options{})
	addr := srv.Addr()
	x := &Call{}
	for i := range 3 {
		if got, err := call(c, x, addr, "hi"); err != nil || got != "0123456789" {
			t.Fatalf("Call %d: %q %v", i, got, err)
		}
		if n := idleConns(c, addr); n != 1 {
			t.Fatalf("after Call %d the pool holds %d connections, want 1", i, n)
		}
	}
	if n := srv.Conns(); n != 1 {
		t.Fatalf("3 sequential Calls used %d connections, want 1", n)
	}

	// Part of the body read, then Close.
	if err := c.Send(x, addr, postHead(addr, "/", 0), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(x, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if n := idleConns(c, addr); n != 0 {
		t.Fatalf("a connection with 6 body bytes unread was pooled")
	}
	// Close with nothing read.
	if err := c.Send(x, addr, postHead(addr, "/", 0), nil); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if n := idleConns(c, addr); n != 0 {
		t.Fatalf("a connection whose body was never read was pooled")
	}
	if got, err := call(c, x, addr, ""); err != nil || got != "0123456789" {
		t.Fatalf("Call after the spent ones: %q %v", got, err)
	}
	if n := srv.Conns(); n != 3 {
		t.Fatalf("connections: %d, want 3 (one kept, two spent)", n)
	}
	if n := requests.Load(); n != 6 {
		t.Fatalf("server saw %d requests for 6 Calls", n)
	}
	// Read after the end, and after Close, is only EOF.
	if n, err := x.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after Close: %d %v", n, err)
	}
}

// TestCallStaleIdleConnection: a connection the server closed while it
// sat in the pool is not written to; the request goes once, on a new
// connection.
func TestCallStaleIdleConnection(t *testing.T) {
	var requests atomic.Int64
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		requests.Add(1)
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return false // closes without saying so
	})
	c := newClient(t, Options{})
	x := &Call{}
	for i := range 4 {
		if got, err := call(c, x, srv.Addr(), "b"); err != nil || got != "ok" {
			t.Fatalf("Call %d: %q %v", i, got, err)
		}
		eventually(t, "the server's close to reach the pooled connection", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, pc := range c.idle[srv.Addr()] {
				if connAlive(pc.nc) {
					return false
				}
			}
			return true
		})
	}
	if n := requests.Load(); n != 4 {
		t.Fatalf("server saw %d requests for 4 Calls", n)
	}
	if n := srv.Conns(); n != 4 {
		t.Fatalf("server accepted %d connections, want 4", n)
	}
}

// opaqueDial dials connections the pool cannot peek at (they hide the
// socket), so a dead one is reused as one the peek missed would be:
// within a trust window, or closed between the peek and the write. inner
// keeps the sockets for the test to check.
func opaqueDial(inner *[]net.Conn, mu *sync.Mutex) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		*inner = append(*inner, nc)
		mu.Unlock()
		return countingConn{nc, new(atomic.Int64)}, nil
	}
}

// TestCallRetryUnwritten: a reused connection the server reset, which
// the liveness check let through, fails the write before one byte goes
// out; the request is sent again on a new connection, once.
func TestCallRetryUnwritten(t *testing.T) {
	var requests atomic.Int64
	srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		requests.Add(1)
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
		// Let the client read the answer (its Close then sees nothing
		// more buffered and pools the connection), then reset.
		time.Sleep(20 * time.Millisecond)
		_ = c.(*net.TCPConn).SetLinger(0)
	})
	var mu sync.Mutex
	var inner []net.Conn
	c := newClient(t, Options{Dial: opaqueDial(&inner, &mu)})
	x := &Call{}
	for i := range 3 {
		if got, err := call(c, x, srv.Addr(), "b"); err != nil || got != "ok" {
			t.Fatalf("Call %d: %q %v", i, got, err)
		}
		eventually(t, "the server's reset to reach the pooled connection", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return !connAlive(inner[len(inner)-1])
		})
		if n := idleConns(c, srv.Addr()); n != 1 {
			t.Fatalf("pool holds %d connections, want the reset one", n)
		}
	}
	if got, err := call(c, x, srv.Addr(), "b"); err != nil || got != "ok" {
		t.Fatalf("last Call: %q %v", got, err)
	}
	if n := requests.Load(); n != 4 {
		t.Fatalf("server saw %d requests for 4 Calls", n)
	}
	if n := srv.Conns(); n != 4 {
		t.Fatalf("server accepted %d connections, want 4", n)
	}
}

// TestCallClosedReusedConnection: a connection the server closed (FIN)
// that the liveness check let through takes the request (the kernel
// accepts it) and fails; the request is not sent again.
func TestCallClosedReusedConnection(t *testing.T) {
	var requests atomic.Int64
	srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		requests.Add(1)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	var mu sync.Mutex
	var inner []net.Conn
	c := newClient(t, Options{Dial: opaqueDial(&inner, &mu)})
	x := &Call{}
	if got, err := call(c, x, srv.Addr(), "b"); err != nil || got != "ok" {
		t.Fatalf("first Call: %q %v", got, err)
	}
	eventually(t, "the server's close to reach the pooled connection", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !connAlive(inner[0])
	})
	_, err := call(c, x, srv.Addr(), "b")
	if err == nil || !strings.Contains(err.Error(), "closed the kept-alive connection") {
		t.Fatalf("Call on the closed connection: %v, want the server's close named", err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("server read %d requests, want 1: a request is never sent twice", n)
	}
	if n := srv.Conns(); n != 1 {
		t.Fatalf("server accepted %d connections, want 1", n)
	}
}

// isTimeout reports a deadline's error as net/http's callers test it.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// silentServer reads requests and never answers; received counts them.
func silentServer(t *testing.T) (*testproc.ConnServer, *atomic.Int64) {
	var received atomic.Int64
	srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readRawRequest(br); err != nil {
			return
		}
		received.Add(1)
		drain(br)
	})
	return srv, &received
}

// TestCallDeadline: a deadline set before Send or while it waits ends a
// read of a silent server soon after it passes, and that connection is
// not pooled.
func TestCallDeadline(t *testing.T) {
	srv, received := silentServer(t)
	c := newClient(t, Options{})

	t.Run("before Send", func(t *testing.T) {
		x := &Call{}
		defer x.Close()
		deadline := time.Now().Add(100 * time.Millisecond)
		x.SetDeadline(deadline)
		err := c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 0), nil)
		if !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Send to a silent server: %v, want a timeout", err)
		}
		if late := time.Since(deadline); late > 10*time.Second {
			t.Fatalf("Send returned %v after the deadline", late)
		}
	})

	t.Run("during Send", func(t *testing.T) {
		before := received.Load()
		x := &Call{}
		defer x.Close()
		errc := make(chan error, 1)
		go func() { errc <- c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 0), nil) }()
		eventually(t, "the server to read the request", func() bool { return received.Load() > before })
		deadline := time.Now().Add(50 * time.Millisecond)
		x.SetDeadline(deadline)
		select {
		case err := <-errc:
			if !isTimeout(err) {
				t.Fatalf("Send: %v, want a timeout", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Send still waiting 20s after its deadline")
		}
	})

	t.Run("during Read", func(t *testing.T) {
		srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart")
			drain(br)
		})
		x := &Call{}
		defer x.Close()
		if err := c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 0), nil); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(x, got); err != nil || string(got) != "part" {
			t.Fatalf("first body bytes %q %v", got, err)
		}
		errc := make(chan error, 1)
		go func() { _, err := x.Read(make([]byte, 10)); errc <- err }()
		time.Sleep(10 * time.Millisecond) // most likely blocked by now; either way the deadline holds
		x.SetDeadline(time.Now().Add(20 * time.Millisecond))
		select {
		case err := <-errc:
			if !isTimeout(err) {
				t.Fatalf("Read: %v, want a timeout", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Read still waiting 20s after its deadline")
		}
		x.Close()
		if n := idleConns(c, srv.Addr()); n != 0 {
			t.Fatalf("a timed-out connection was pooled")
		}
	})
	if n := idleConns(c, srv.Addr()); n != 0 {
		t.Fatalf("%d timed-out connections pooled", n)
	}
}

// TestCallDeadlinePassed: a deadline already past when Send writes on a
// pooled connection fails the Call with the deadline's error; the
// connection is not taken for dead, and nothing is dialed for it.
func TestCallDeadlinePassed(t *testing.T) {
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	c := newClient(t, Options{})
	addr := srv.Addr()
	if got, err := call(c, &Call{}, addr, ""); err != nil || got != "ok" {
		t.Fatalf("first Call: %q %v", got, err)
	}
	x := &Call{}
	x.SetDeadline(time.Now().Add(-time.Second))
	err := c.Send(x, addr, postHead(addr, "/", 0), nil)
	x.Close()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Send past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if n := srv.Conns(); n != 1 {
		t.Fatalf("server accepted %d connections, want 1: a passed deadline is not a dead connection", n)
	}
}

// TestCallDeadlineNotPooled: a Call with a deadline that completes gives
// its connection back without the deadline: a later request on it that
// outlasts the old deadline works, on the same connection.
func TestCallDeadlineNotPooled(t *testing.T) {
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		if r.URL.Path == "/slow" {
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	c := newClient(t, Options{})
	addr := srv.Addr()
	for _, during := range []bool{false, true} {
		x := &Call{}
		deadline := time.Now().Add(50 * time.Millisecond)
		if !during {
			x.SetDeadline(deadline)
		}
		if err := c.Send(x, addr, postHead(addr, "/", 0), nil); err != nil {
			t.Fatal(err)
		}
		if during {
			x.SetDeadline(deadline)
		}
		b, err := io.ReadAll(x)
		x.Close()
		if err != nil || string(b) != "ok" {
			t.Fatalf("Call with a deadline: %q %v (loaded machine?)", b, err)
		}
		for time.Now().Before(deadline.Add(10 * time.Millisecond)) {
			time.Sleep(time.Until(deadline) + 10*time.Millisecond)
		}
		// Both APIs share the pool; a deadline left on the connection
		// would fail the write at once (and RoundTrip re-dial) or the
		// slow answer's read.
		if _, got := do(t, c, &Request{Target: srvURL(t, srv, "/slow")}); got != "ok" {
			t.Fatalf("RoundTrip after the Call: %q", got)
		}
		if got, err := call(c, x, addr, ""); err != nil || got != "ok" {
			t.Fatalf("Call after the Call: %q %v", got, err)
		}
	}
	if n := srv.Conns(); n != 1 {
		t.Fatalf("used %d connections, want 1", n)
	}
}

// TestCallAbort: Abort from another goroutine ends a Send waiting on a
// dial, a silent server or a write the server does not read, at once,
// with an error IsAborted knows; the connection is closed, not pooled.
func TestCallAbort(t *testing.T) {
	t.Run("before Send", func(t *testing.T) {
		srv, received := silentServer(t)
		c := newClient(t, Options{})
		x := &Call{}
		x.Abort()
		err := c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 0), nil)
		x.Close()
		if !IsAborted(err) {
			t.Fatalf("Send after Abort: %v", err)
		}
		if n := srv.Conns() + received.Load(); n != 0 {
			t.Fatal("an aborted Call connected")
		}
	})

	t.Run("after Close", func(t *testing.T) {
		// The contract a caller reusing a Call keeps: an Abort after Close
		// is for the next Send (it cannot tell them apart), so a caller
		// stops whatever may call Abort before Close.
		srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return true
		})
		c := newClient(t, Options{})
		x := &Call{}
		if got, err := call(c, x, srv.Addr(), ""); err != nil || got != "ok" {
			t.Fatalf("first Call: %q %v", got, err)
		}
		x.Abort()
		if _, err := call(c, x, srv.Addr(), ""); !IsAborted(err) {
			t.Fatalf("Send after an Abort that followed Close: %v, want it aborted", err)
		}
		if got, err := call(c, x, srv.Addr(), ""); err != nil || got != "ok" {
			t.Fatalf("Call after the aborted one's Close: %q %v", got, err)
		}
	})

	t.Run("dial", func(t *testing.T) {
		dialing := make(chan context.Context, 1)
		c := newClient(t, Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialing <- ctx
			<-ctx.Done() // a dial that does not complete
			return nil, ctx.Err()
		}})
		x := &Call{}
		errc := make(chan error, 1)
		go func() { errc <- c.Send(x, "127.0.0.1:9", postHead("e", "/", 0), nil) }()
		ctx := <-dialing
		x.Abort()
		if err := <-errc; !IsAborted(err) {
			t.Fatalf("Send aborted while dialing: %v", err)
		}
		if ctx.Err() == nil {
			t.Fatal("the dial's context was not cancelled")
		}
		x.Close()
	})

	t.Run("read", func(t *testing.T) {
		var received atomic.Int64
		var closed atomic.Bool
		srv2 := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			received.Add(1)
			drain(br)
			closed.Store(true)
		})
		c := newClient(t, Options{})
		x := &Call{}
		errc := make(chan error, 1)
		go func() { errc <- c.Send(x, srv2.Addr(), postHead(srv2.Addr(), "/", 0), nil) }()
		eventually(t, "the server to read the request", func() bool { return received.Load() == 1 })
		x.Abort()
		if err := <-errc; !IsAborted(err) {
			t.Fatalf("Send aborted while reading: %v", err)
		}
		x.Close()
		eventually(t, "the aborted connection to close", closed.Load)
		if n := idleConns(c, srv2.Addr()); n != 0 {
			t.Fatal("an aborted connection was pooled")
		}
	})

	t.Run("body read", func(t *testing.T) {
		srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readRawRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\npart\r\n")
			drain(br)
		})
		c := newClient(t, Options{})
		x := &Call{}
		if err := c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", 0), nil); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { _, err := io.ReadAll(x); errc <- err }()
		time.Sleep(10 * time.Millisecond)
		x.Abort()
		if err := <-errc; !IsAborted(err) {
			t.Fatalf("Read aborted: %v", err)
		}
		x.Close()
		if n := idleConns(c, srv.Addr()); n != 0 {
			t.Fatal("an aborted connection was pooled")
		}
	})

	t.Run("write", func(t *testing.T) {
		accepted := make(chan struct{}, 1)
		done := make(chan struct{})
		srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
			accepted <- struct{}{}
			<-done // reads nothing
		})
		t.Cleanup(func() { close(done) }) // before the server's cleanup
		c := newClient(t, Options{})
		body := make([]byte, 64<<20) // more than loopback's socket buffers hold
		x := &Call{}
		errc := make(chan error, 1)
		go func() {
			errc <- c.Send(x, srv.Addr(), postHead(srv.Addr(), "/", len(body)), body)
		}()
		<-accepted
		time.Sleep(50 * time.Millisecond) // the write is blocked by now, or Send reads; either way Abort ends it
		x.Abort()
		select {
		case err := <-errc:
			if !IsAborted(err) {
				t.Fatalf("Send aborted while writing: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Abort did not end a blocked write")
		}
		x.Close()
		if n := idleConns(c, srv.Addr()); n != 0 {
			t.Fatal("an aborted connection was pooled")
		}
	})
}

// TestCallLateAbort: an Abort or SetDeadline after the answer was read
// whole (before Close, or after it) leaves the pooled connection alone:
// the next Call takes it and goes through on it, with no new dial.
func TestCallLateAbort(t *testing.T) {
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		return true
	})
	c := newClient(t, Options{})
	addr := srv.Addr()
	for i, late := range []func(x *Call){
		func(x *Call) { x.Abort() },
		func(x *Call) { x.SetDeadline(aLongTimeAgo) },
	} {
		for _, afterClose := range []bool{false, true} {
			x := &Call{}
			if err := c.Send(x, addr, postHead(addr, "/", 2), []byte("a1")); err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(x); err != nil || string(b) != "a1" {
				t.Fatalf("first Call: %q %v", b, err)
			}
			if afterClose {
				x.Close()
				late(x)
			} else {
				late(x)
				x.Close()
			}
			if n := idleConns(c, addr); n != 1 {
				t.Fatalf("%d/%v: pool holds %d connections after the first Call, want 1", i, afterClose, n)
			}
			if got, err := call(c, &Call{}, addr, "b2"); err != nil || got != "b2" {
				t.Fatalf("%d/%v: Call after a late Abort or deadline: %q %v", i, afterClose, got, err)
			}
		}
	}
	if n := srv.Conns(); n != 1 {
		t.Fatalf("a late Abort or deadline spent the pooled connection: %d connections, want 1", n)
	}
}

// TestCallAbortRace: Calls on a shared pool, half of them with an Abort
// racing every step from Send to after Close, some with a racing
// SetDeadline. A Call not aborted always gets its own answer whole; an
// aborted one gets its answer or IsAborted; no request reaches the
// server twice. Run under -race.
func TestCallAbortRace(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := newRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		mu.Lock()
		seen[body]++
		mu.Unlock()
		// Chunked half the time: the end of the body is found by the
		// decoder, not a count.
		if len(body)%2 == 0 {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked(body, 3))
		} else {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		}
		return true
	})
	c := newClient(t, Options{})
	addr := srv.Addr()
	const workers, rounds = 4, 150
	var wg sync.WaitGroup
	var aborted, whole atomic.Int64
	errs := make(chan error, workers*rounds)
	for g := range workers {
		wg.Go(func() {
			reused := &Call{}
			for i := range rounds {
				id := fmt.Sprintf("g%d-call-%d%s", g, i, strings.Repeat("x", i%2))
				abort := i%2 == 1
				x := reused
				if g%2 == 0 {
					x = &Call{} // a fresh Call: its Abort may land after Close
				}
				var racer sync.WaitGroup
				if abort || i%3 == 0 {
					racer.Go(func() {
						// From before Send to after Close.
						switch i % 4 {
						case 1:
							for range (i * 7) % 50 {
								runtime.Gosched()
							}
						case 2:
							time.Sleep(time.Duration(i%7) * 30 * time.Microsecond)
						case 3:
							time.Sleep(time.Duration(i%5) * 200 * time.Microsecond)
						}
						if abort {
							x.Abort()
						} else {
							x.SetDeadline(time.Now().Add(time.Hour))
						}
					})
				}
				err := c.Send(x, addr, postHead(addr, "/", len(id)), []byte(id))
				var b []byte
				if err == nil {
					b, err = io.ReadAll(x)
				}
				if x == reused {
					// Close resets the Call for its next Send: an Abort
					// after it would end that one.
					racer.Wait()
				}
				x.Close()
				racer.Wait()
				switch {
				case err == nil && string(b) == id:
					whole.Add(1)
				case err == nil:
					errs <- fmt.Errorf("%s: got another answer %q", id, b)
				case abort && IsAborted(err):
					aborted.Add(1)
				default:
					errs <- fmt.Errorf("%s (abort %v): %w", id, abort, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	for id, n := range seen {
		if n > 1 {
			t.Errorf("request %s reached the server %d times", id, n)
		}
	}
	mu.Unlock()
	t.Logf("%d answers whole, %d aborted", whole.Load(), aborted.Load())
}
