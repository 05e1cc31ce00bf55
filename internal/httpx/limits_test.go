package httpx

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func TestLimitsDefaults(t *testing.T) {
	l := Limits{}.WithDefaults()
	want := Limits{ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 60 * time.Second, IdleTimeout: 90 * time.Second,
		WriteTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10, MaxConns: 4096}
	if l != want {
		t.Fatalf("defaults %+v, want %+v", l, want)
	}
	if l := (Limits{MaxConns: -1}).WithDefaults(); l.MaxConns != -1 {
		t.Fatalf("no cap became %d", l.MaxConns)
	}
	s := want.Server(http.NotFoundHandler(), nil)
	if s.ReadHeaderTimeout != want.ReadHeaderTimeout || s.IdleTimeout != want.IdleTimeout || s.MaxHeaderBytes != want.MaxHeaderBytes ||
		s.ReadTimeout != 0 || s.WriteTimeout != 0 {
		t.Fatalf("server %+v", s)
	}
}

// TestSlowHeadCutAtReadHeaderTimeout: a head trickled a byte at a time is
// cut at ReadHeaderTimeout, however long the trickle would go on (the
// client here would send for 10 s).
func TestSlowHeadCutAtReadHeaderTimeout(t *testing.T) {
	addr := edge(t, Limits{ReadHeaderTimeout: 300 * time.Millisecond}, http.HandlerFunc(ok))
	c := dial(t, addr)
	head := "POST / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100)
	defer testproc.Trickle(c, []byte(head), 100*time.Millisecond)() // about 13 s
	// net/http answers 400 to a head cut part-way; the connection closes.
	if got := readClosed(t, c); got != "" && !strings.HasPrefix(got, "HTTP/1.1 400 ") {
		t.Fatalf("answer to a head that never ended: %q", got)
	}
}

// TestSlowBodyCutAtBodyTimeout: BodyDeadline cuts a body read that does
// not end in time; the handler sees a timeout error.
func TestSlowBodyCutAtBodyTimeout(t *testing.T) {
	l := Limits{BodyTimeout: 300 * time.Millisecond}
	errc := make(chan error, 1)
	addr := edge(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.BodyDeadline(w)
		_, err := io.Copy(io.Discard, r.Body)
		errc <- err
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusRequestTimeout)
	}))
	c := dial(t, addr)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
	resp, _ := testproc.ReadResponse(t, bufio.NewReader(c))
	if err := <-errc; !isTimeout(err) {
		t.Fatalf("body read ended with %v, want a timeout", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestIdleConnectionClosedAtIdleTimeout: a keep-alive connection that
// sends nothing after its answer is closed.
func TestIdleConnectionClosedAtIdleTimeout(t *testing.T) {
	addr := edge(t, Limits{IdleTimeout: 300 * time.Millisecond}, http.HandlerFunc(ok))
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, body := testproc.ReadResponse(t, br); resp.StatusCode != 200 || body != "ok" || resp.Close {
		t.Fatalf("%d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if rest, err := io.ReadAll(br); err != nil && !isReset(err) || len(rest) != 0 {
		t.Fatalf("idle connection: %q, %v; want a close by the server", rest, err)
	}
}

// TestHeaderTooLargeIs431: a head over MaxHeaderBytes gets a 431 the
// client can read (the connection is half-closed first, not reset).
func TestHeaderTooLargeIs431(t *testing.T) {
	addr := edge(t, Limits{MaxHeaderBytes: 4 << 10}, http.HandlerFunc(ok))
	c := dial(t, addr)
	// 64 KiB of header in one write, more than the limit plus net/http's
	// 4 KiB slack.
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 64<<10))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to an oversized head: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

// TestConnectionCap: with MaxConns open connections, the next client is
// not served until one of them closes; then it is.
func TestConnectionCap(t *testing.T) {
	addr := edge(t, Limits{MaxConns: 2}, http.HandlerFunc(ok))
	get := func(br *bufio.Reader) {
		t.Helper()
		if resp, body := testproc.ReadResponse(t, br); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	held := []*bufio.Reader{}
	conns := []interface{ Close() error }{}
	for range 2 {
		c := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		get(br) // accepted and served: it holds a slot while open
		held = append(held, br)
		conns = append(conns, c)
	}
	third := dial(t, addr) // the kernel completes the handshake (backlog)
	io.WriteString(third, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	one := make([]byte, 1)
	if n, err := third.Read(one); n != 0 || !isTimeout(err) {
		t.Fatalf("third connection served over a cap of 2: %d bytes, %v", n, err)
	}
	conns[0].Close()
	_ = third.SetReadDeadline(time.Now().Add(15 * time.Second))
	get(bufio.NewReader(third))
	_ = held
}

// TestLimitListenerCloseUnblocksAccept: closing the listener ends an
// Accept waiting for a free slot (so Shutdown does not hang on it).
func TestLimitListenerCloseUnblocksAccept(t *testing.T) {
	ln := mustListen(t)
	l := LimitListener(ln, 0)
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	l.Close()
	if err := <-errc; err == nil {
		t.Fatal("Accept on a closed full listener returned a connection")
	}
}

// TestWriteDeadlines: an answer the client does not read is cut at
// WriteTimeout (the handler's write fails); a handler under
// NoWriteDeadline may answer after it; a StreamWriter's deadline moves
// with each write.
func TestWriteDeadlines(t *testing.T) {
	l := Limits{WriteTimeout: 300 * time.Millisecond}
	writeErr := make(chan error, 1)
	big := make([]byte, 1<<20)
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		for range 256 { // 256 MiB: far more than socket buffers hold
			if _, err := w.Write(big); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})
	mux.Handle("/late", NoWriteDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * l.WriteTimeout)
		_, _ = io.WriteString(w, "late")
	})))
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		sw := l.StreamWriter(w)
		for i := range 4 {
			time.Sleep(l.WriteTimeout / 2) // 4 × half the timeout: longer than one
			if _, err := fmt.Fprintf(sw, "%d", i); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
		}
	})
	addr := edge(t, l, mux)

	c := dial(t, addr)
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	if err := <-writeErr; !isTimeout(err) {
		t.Fatalf("unread answer: write ended with %v, want a timeout", err)
	}
	for path, want := range map[string]string{"/late": "late", "/stream": "0123"} {
		c = dial(t, addr)
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, body := testproc.ReadResponse(t, bufio.NewReader(c)); resp.StatusCode != 200 || body != want {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
}
