package httpx

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func testTransport() *http.Transport {
	return NewTransport(TransportConfig{DialTimeout: 5 * time.Second, IdleConnTimeout: 2 * time.Second, MaxIdleConnsPerHost: 4})
}

func post(t *testing.T, tr *http.Transport, addr, body string) (*http.Response, error) {
	t.Helper()
	b, err := ReadBody(strings.NewReader(body), int64(len(body)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/x", nil)
	resp, err := tr.RoundTrip(b.Attach(req))
	if err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// TestTransportSendsOnce: an upstream that reads the request and then
// closes the connection without answering fails the request; it is not
// re-sent (the upstream sees exactly one), even on a reused connection
// and with a rewindable body.
func TestTransportSendsOnce(t *testing.T) {
	var requests atomic.Int64
	srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if req.Header.Get("X-Drop") == "" && requests.Load() == 0 {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				requests.Add(1)
				continue
			}
			requests.Add(1)
			return // read, then hang up
		}
	})
	tr := testTransport()
	defer tr.CloseIdleConnections()
	if _, err := post(t, tr, srv.Addr(), `{"warm":1}`); err != nil {
		t.Fatal(err)
	}
	// The pooled connection is reused for this one, and dropped after it
	// was read.
	if _, err := post(t, tr, srv.Addr(), `{"drop":1}`); err == nil {
		t.Fatal("a request the upstream dropped succeeded")
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("upstream read %d requests for 2 sent: one was re-sent", n)
	}
}

// TestTransportRefusesHugeHead: an answer head past
// MaxResponseHeaderBytes fails the round trip; the Transport stops
// reading instead of buffering it, so the upstream cannot write it all.
func TestTransportRefusesHugeHead(t *testing.T) {
	srv := testproc.NewHugeHeadServer(t)
	tr := testTransport()
	defer tr.CloseIdleConnections()
	_, err := post(t, tr, srv.Addr(), `{}`)
	if err == nil || !strings.Contains(err.Error(), "header") {
		t.Fatalf("64 MiB answer head: %v, want a header-size error", err)
	}
	tr.CloseIdleConnections()
	// The upstream got only as far as the socket buffers let it.
	if w := srv.Wrote(); w >= testproc.HugeHead {
		t.Fatalf("upstream wrote all %d MiB of its head", w>>20)
	}
}

// TestTransportSettings pins what the rules depend on.
func TestTransportSettings(t *testing.T) {
	tr := NewTransport(TransportConfig{IdleConnTimeout: time.Second})
	if tr.Proxy != nil || !tr.DisableCompression || tr.ForceAttemptHTTP2 || tr.MaxResponseHeaderBytes != MaxResponseHeaderBytes ||
		tr.IdleConnTimeout != time.Second {
		t.Fatalf("transport %+v", tr)
	}
}

// recConn records whether a write came straight from want's buffer (its
// end: the first few KiB share the head's write buffer).
type recConn struct {
	net.Conn
	want   []byte
	direct atomic.Bool
}

func (c *recConn) Write(p []byte) (int, error) {
	if len(p) > 0 && len(c.want) > 0 && &p[len(p)-1] == &c.want[len(c.want)-1] {
		c.direct.Store(true)
	}
	return c.Conn.Write(p)
}

// TestTransportWritesBodyFromItsBuffer: the Transport writes a Body of
// known length from the Body's own buffer (bodyConn.ReadFrom), not
// through a copy.
func TestTransportWritesBodyFromItsBuffer(t *testing.T) {
	srv := testproc.NewRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		_, _ = io.WriteString(w, body)
		return true
	})
	data := strings.Repeat("b", 256<<10)
	b, err := ReadBody(strings.NewReader(data), int64(len(data)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	tr := testTransport()
	defer tr.CloseIdleConnections()
	var rc *recConn
	dial := (&net.Dialer{}).DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		rc = &recConn{Conn: c, want: b.Bytes()}
		return bodyConn{rc}, nil
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+srv.Addr()+"/x", nil)
	resp, err := tr.RoundTrip(b.Attach(req))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != data {
		t.Fatalf("upstream read %d bytes, want %d", len(got), len(data))
	}
	if !rc.direct.Load() {
		t.Fatal("the body was copied before it was written")
	}
	// Written and released: the buffer is back in its pool.
	b.Release()
	if b.refs.Load() != 0 || b.buf != nil {
		t.Fatalf("buffer not returned: refs %d", b.refs.Load())
	}
}

// TestBodyHeldWhileWritten: an upstream that answers before reading the
// body ends the round trip while the body is still being written; the
// buffer must outlive Release until that write ends.
func TestBodyHeldWhileWritten(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	srv := testproc.NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// Answer at once, read nothing of the (large) body yet.
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		<-release
		_, _ = io.Copy(io.Discard, br)
	})
	t.Cleanup(free)                     // before the server's cleanup, which waits for the handler
	data := strings.Repeat("c", 32<<20) // far more than the socket buffers take
	b, err := ReadBody(strings.NewReader(data), int64(len(data)), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	tr := testTransport()
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "http://"+srv.Addr()+"/x", nil)
	resp, err := tr.RoundTrip(b.Attach(req))
	if err != nil {
		t.Fatal(err)
	}
	// The answer is in, its body unread: the Transport keeps the
	// connection and its write, blocked on an upstream not reading.
	b.Release()
	if b.refs.Load() == 0 {
		t.Fatal("buffer released while the Transport was still writing it")
	}
	free() // the upstream reads the rest; the write ends
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	deadline := time.Now().Add(15 * time.Second)
	for b.refs.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("buffer never returned after the write ended: refs %d", b.refs.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestInMemory(t *testing.T) {
	br := bytes.NewReader([]byte("x"))
	if inMemory(br) != br || inMemory(io.NopCloser(br)) != br {
		t.Fatal("a *bytes.Reader, bare or in io.NopCloser, not recognised")
	}
	for _, r := range []io.Reader{strings.NewReader("x"), io.NopCloser(strings.NewReader("x")), io.LimitReader(br, 1)} {
		if inMemory(r) != nil {
			t.Fatalf("%T taken for a *bytes.Reader", r)
		}
	}
}
