package httpx

import (
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testproc.IgnoreRSTAvoidance) }

// edge serves h behind l as the router and gateway do (Limits.Server on
// Limits.Listener) and returns its address.
func edge(t *testing.T, l Limits, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := l.Server(h, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l.Listener(ln))
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// dial opens a raw connection whose reads and writes end within 15 s.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	return c
}

// readClosed reads c to its end and fails unless the server closed it
// (EOF or reset) before the client's deadline; it returns what was read.
func readClosed(t *testing.T, c net.Conn) string {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil && (isTimeout(err) || !isReset(err)) {
		t.Fatalf("connection not closed by the server: %v (read %q)", err, b)
	}
	return string(b)
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// isTimeout reports whether err is an expired deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func ok(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "ok")
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
