package testproc

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// HugeHeadServer is an upstream that answers every request with a status
// line and then up to 64 MiB of header fields, as fast as the socket takes
// them. Wrote is how many bytes it got onto the socket: a client that
// stops reading at its head limit leaves it far short of 64 MiB.
type HugeHeadServer struct {
	*ConnServer
	wrote atomic.Int64
}

// HugeHead is the size the HugeHeadServer tries to write.
const HugeHead = 64 << 20

// NewHugeHeadServer starts a HugeHeadServer.
func NewHugeHeadServer(t testing.TB) *HugeHeadServer {
	s := &HugeHeadServer{}
	s.ConnServer = NewConnServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := []byte("X-Big: " + strings.Repeat("a", 64<<10-9) + "\r\n")
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for s.wrote.Load() < HugeHead {
			n, err := c.Write(line)
			s.wrote.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	return s
}

// Wrote is how many bytes of the answer reached the socket.
func (s *HugeHeadServer) Wrote() int64 { return s.wrote.Load() }

// Trickle writes one byte of b to c every interval, as a slow client
// does, until b is sent, a write fails, or the returned stop is called
// (which waits for the writer to end).
func Trickle(c net.Conn, b []byte, interval time.Duration) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range b {
			select {
			case <-quit:
				return
			case <-time.After(interval):
			}
			if _, err := c.Write(b[i : i+1]); err != nil {
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

// ReadResponse reads one whole answer from br, failing the test if it
// cannot.
func ReadResponse(t testing.TB, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, string(b)
}

// HalfCloseAnswer half-closes c (the client has sent everything) and
// returns all the server writes before it closes the connection; a reset
// counts as the end.
func HalfCloseAnswer(t testing.TB, c net.Conn) string {
	t.Helper()
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading after half-close: %v", err)
	}
	return string(got)
}

// IgnoreRSTAvoidance is the goleak option for a net/http server
// connection that answered an error (431, 400) and sleeps 500 ms, after
// half-closing, before it closes, so the client reads the answer instead
// of a reset (net/http's rstAvoidanceDelay). The sleep cannot be cut
// short; it ends on its own.
var IgnoreRSTAvoidance = goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait")

// ReadClosed reads r (a connection's reader) to its end and fails the test
// unless the server closed the connection (EOF or reset) before the
// connection's own deadline.
func ReadClosed(t testing.TB, r io.Reader) {
	t.Helper()
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if err != nil && (errors.As(err, &ne) && ne.Timeout() || !errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}
