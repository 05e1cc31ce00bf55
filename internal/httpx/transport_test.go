package httpx

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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
	req.Body, req.ContentLength = b.Reader(), int64(b.Len())
	req.GetBody = func() (io.ReadCloser, error) { return b.Reader(), nil }
	resp, err := tr.RoundTrip(req)
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

// recConn records whether a write came straight from want's buffer.
type recConn struct {
	net.Conn
	want   []byte
	direct atomic.Bool
}

func (c *recConn) Write(p []byte) (int, error) {
	if len(p) > 0 && len(c.want) > 0 && &p[0] == &c.want[0] {
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
	defer b.Release()
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
	req.Body, req.ContentLength = b.Reader(), int64(b.Len())
	resp, err := tr.RoundTrip(req)
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
}
