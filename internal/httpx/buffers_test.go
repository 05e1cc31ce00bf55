package httpx

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// sizesConn records the length of every Read buffer and Write.
type sizesConn struct {
	net.Conn
	mu            sync.Mutex
	reads, writes []int
}

func (c *sizesConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.reads = append(c.reads, len(p))
	c.mu.Unlock()
	return c.Conn.Read(p)
}

func (c *sizesConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *sizesConn) sizes() (reads, writes []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.reads...), append([]int(nil), c.writes...)
}

// recordingTransport is NewTransport(cfg) whose connections record their
// reads and writes (under bodyConn, as in NewTransport).
func recordingTransport(t *testing.T, cfg TransportConfig) (*http.Transport, func() *sizesConn) {
	tr := NewTransport(cfg)
	t.Cleanup(tr.CloseIdleConnections)
	var mu sync.Mutex
	var last *sizesConn
	dial := (&net.Dialer{}).DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		sc := &sizesConn{Conn: c}
		mu.Lock()
		last = sc
		mu.Unlock()
		return bodyConn{sc}, nil
	}
	return tr, func() *sizesConn { mu.Lock(); defer mu.Unlock(); return last }
}

// TestTransportBuffers: the Transport's connections read through a
// TransportReadBufSize buffer (an event stream's small reads never reach
// the socket with more), a bulk answer's reads bypass it (CopyBufSize
// straight from the socket: bulk is not slowed), and a small request
// leaves, head and body, in one write of at most TransportWriteBufSize.
// A TransportConfig size replaces the default.
func TestTransportBuffers(t *testing.T) {
	bulk := strings.Repeat("b", 256<<10)
	srv := testproc.NewRawServer(t, func(w *bufio.Writer, r *http.Request, body string) bool {
		if r.URL.Path == "/bulk" {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(bulk), bulk)
			return true
		}
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for i := range 20 {
			frame := fmt.Sprintf("data: {\"choices\":[{\"delta\":{\"content\":\"token %d\"}}]}\n\n", i)
			fmt.Fprintf(w, "%x\r\n%s\r\n", len(frame), frame)
			w.Flush() // one chunk per segment, as an engine sends them
		}
		io.WriteString(w, "0\r\n\r\n")
		return true
	})
	roundTrip := func(t *testing.T, tr *http.Transport, path, body string, relay func(io.Writer, func() error, io.Reader, func(), func(int)) (error, error)) int {
		t.Helper()
		b, err := ReadBody(strings.NewReader(body), int64(len(body)), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		req, _ := http.NewRequest(http.MethodPost, "http://"+srv.Addr()+path, nil)
		resp, err := tr.RoundTrip(b.Attach(req))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var n counter
		if rerr, werr := relay(&n, nil, resp.Body, nil, nil); rerr != nil || werr != nil {
			t.Fatal(rerr, werr)
		}
		return int(n)
	}
	small := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

	t.Run("defaults", func(t *testing.T) {
		tr, conn := recordingTransport(t, TransportConfig{DialTimeout: 5 * time.Second, IdleConnTimeout: 2 * time.Second, MaxIdleConnsPerHost: 4})
		if n := roundTrip(t, tr, "/events", small, RelayEvents); n == 0 {
			t.Fatal("empty stream")
		}
		reads, writes := conn().sizes()
		for _, n := range reads {
			if n != TransportReadBufSize {
				t.Fatalf("an event stream's socket reads %v, want every one %d", reads, TransportReadBufSize)
			}
		}
		if len(writes) != 1 || writes[0] > TransportWriteBufSize {
			t.Fatalf("the request went out in writes of %v bytes, want one of at most %d", writes, TransportWriteBufSize)
		}
		if n := roundTrip(t, tr, "/bulk", small, Relay); n != len(bulk) {
			t.Fatalf("bulk answer: %d bytes, want %d", n, len(bulk))
		}
		reads, _ = conn().sizes()
		bypassed := 0
		for _, n := range reads {
			if n >= CopyBufSize {
				bypassed++
			}
		}
		if bypassed == 0 {
			t.Fatalf("bulk socket reads %v: none took the relay's %d-byte buffer directly", reads, CopyBufSize)
		}
	})
	t.Run("configured", func(t *testing.T) {
		tr, conn := recordingTransport(t, TransportConfig{DialTimeout: 5 * time.Second, ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10})
		body := strings.Repeat("x", 3<<10)
		roundTrip(t, tr, "/events", body, RelayEvents)
		reads, writes := conn().sizes()
		if len(writes) != 1 || reads[0] != 4<<10 {
			t.Fatalf("with 4 KiB buffers a 3 KiB body went out in writes of %v, reads %v", writes, reads)
		}
	})
}

// counter is a Writer that counts.
type counter int

func (c *counter) Write(p []byte) (int, error) { *c += counter(len(p)); return len(p), nil }
