package httpx

import (
	"bufio"
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
