package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// wait bounds every blocking step of a test: generous, for a loaded
// machine; reaching it is a failure, never a timing assertion.
const wait = 10 * time.Second

// handler is the test's fast path: by default it takes POSTs under
// /fast and echoes the body with a Content-Length answer.
type handler struct {
	take  func(h *Head) bool
	serve func(x *Exchange)
}

func (h *handler) Take(hd *Head) bool {
	if h.take != nil {
		return h.take(hd)
	}
	return string(hd.Method) == http.MethodPost && bytes.HasPrefix(hd.Path, []byte("/fast"))
}

func (h *handler) Serve(x *Exchange) {
	if h.serve != nil {
		h.serve(x)
		return
	}
	echo(x)
}

// echo answers with the request body, as the fast path.
func echo(x *Exchange) {
	body, err := io.ReadAll(x)
	if err != nil {
		x.Abort()
		return
	}
	hdr := "X-Served: fast\r\nX-Path: " + string(x.Head.Path) + "\r\n"
	if err := x.WriteHead(Response{Status: http.StatusOK, Header: []byte(hdr), ContentLength: int64(len(body))}); err != nil {
		return
	}
	_, _ = x.Write(body)
}

// fallbackHandler answers what the fast path leaves: the method, target
// and body as net/http read them.
func fallbackHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("X-Served", "fallback")
	w.Header().Set("X-Target", r.Method+" "+r.RequestURI)
	_, _ = w.Write(body)
}

// testServer is a Server on a loopback port.
type testServer struct {
	*Server
	addr   string
	served chan error // Serve's result
	log    *testproc.Buffer
}

// start serves h on a new loopback listener; configure may set the
// fallback's timeouts. The server is closed at the test's end.
func start(t *testing.T, h Handler, configure func(*http.Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &testproc.Buffer{}
	hs := &http.Server{Handler: http.HandlerFunc(fallbackHandler), ErrorLog: log.New(lb, "", 0)}
	if configure != nil {
		configure(hs)
	}
	ts := &testServer{Server: &Server{Handler: h, Fallback: hs}, addr: ln.Addr().String(), served: make(chan error, 1), log: lb}
	go func() { ts.served <- ts.Serve(ln) }()
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() {
			ts.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(wait):
			t.Errorf("Close did not return within %v", wait)
			return
		}
		select {
		case err := <-ts.served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
			}
		case <-time.After(wait):
			t.Errorf("Serve did not return within %v of Close", wait)
		}
	})
	return ts
}

// client is one raw connection to the server.
type client struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(wait))
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// read reads one whole response.
func (c *client) read() (*http.Response, string) {
	c.t.Helper()
	resp, body, err := c.tryRead()
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return resp, body
}

func (c *client) tryRead() (*http.Response, string, error) {
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// expectClosed asserts the server closes the connection without sending
// anything more.
func (c *client) expectClosed() {
	c.t.Helper()
	var buf [1]byte
	n, err := c.br.Read(buf[:])
	if n > 0 {
		rest, _ := c.br.Peek(c.br.Buffered())
		c.t.Fatalf("got %q%q, want the connection closed", buf[:n], rest)
	}
	if !isClosedErr(err) {
		c.t.Fatalf("read: %v, want the connection closed", err)
	}
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func post(path, body string, fields ...string) string {
	var b strings.Builder
	b.WriteString("POST " + path + " HTTP/1.1\r\nHost: test\r\n")
	for _, f := range fields {
		b.WriteString(f + "\r\n")
	}
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	return b.String()
}

func get(path string, fields ...string) string {
	var b strings.Builder
	b.WriteString("GET " + path + " HTTP/1.1\r\nHost: test\r\n")
	for _, f := range fields {
		b.WriteString(f + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// expect asserts who served a response and what it carried.
func expect(t testing.TB, resp *http.Response, body, served, wantBody string) {
	t.Helper()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Served") != served || body != wantBody {
		t.Fatalf("got %d served by %q body %q, want 200 by %q body %q", resp.StatusCode, resp.Header.Get("X-Served"), body, served, wantBody)
	}
}

// within waits for ch or fails.
func within[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("%s: not within %v", what, wait)
		panic("unreachable")
	}
}

// await is within for a handler's goroutine: it reports a failure and
// false instead of stopping the test.
func await[T any](t testing.TB, ch <-chan T, what string) bool {
	select {
	case <-ch:
		return true
	case <-time.After(wait):
		t.Errorf("%s: not within %v", what, wait)
		return false
	}
}

// awaitCond is poll for a handler's goroutine.
func awaitCond(t testing.TB, what string, cond func() bool) bool {
	end := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(end) {
			t.Errorf("%s: not within %v", what, wait)
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// poll waits for cond or fails.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, wait)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKeepAlive(t *testing.T) {
	ts := start(t, &handler{}, nil)
	c := dial(t, ts.addr)
	for i := range 100 {
		body := fmt.Sprintf(`{"n":%d}`, i)
		c.send(post("/fast/ka", body))
		resp, got := c.read()
		expect(t, resp, got, "fast", body)
		if resp.Close || resp.ContentLength != int64(len(body)) || resp.Header.Get("X-Path") != "/fast/ka" {
			t.Fatalf("response %d: close %v length %d path %q", i, resp.Close, resp.ContentLength, resp.Header.Get("X-Path"))
		}
	}
}

func TestPipelined(t *testing.T) {
	ts := start(t, &handler{}, nil)
	c := dial(t, ts.addr)
	var all strings.Builder
	const n = 50
	for i := range n {
		all.WriteString(post("/fast/p"+strconv.Itoa(i), strings.Repeat(strconv.Itoa(i%10), i)))
	}
	c.send(all.String()) // many heads in the read buffer at once
	for i := range n {
		resp, body := c.read()
		expect(t, resp, body, "fast", strings.Repeat(strconv.Itoa(i%10), i))
		if p := resp.Header.Get("X-Path"); p != "/fast/p"+strconv.Itoa(i) {
			t.Fatalf("response %d answers %q", i, p)
		}
	}
}

func TestEmptyBodyAndQuery(t *testing.T) {
	var gotQuery atomic.Value
	ts := start(t, &handler{serve: func(x *Exchange) {
		gotQuery.Store(string(x.Head.Query))
		echo(x)
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast?a=1&b=%20", ""))
	resp, body := c.read()
	expect(t, resp, body, "fast", "")
	if q := gotQuery.Load(); q != "a=1&b=%20" {
		t.Fatalf("query %q", q)
	}
}

// TestPanic: a panicking handler costs its connection only.
func TestPanic(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		switch string(x.Head.Path) {
		case "/fast/panic":
			_ = x.WriteHead(Response{Status: 200, ContentLength: 2})
			panic("test panic")
		case "/fast/abort":
			panic(http.ErrAbortHandler)
		}
		echo(x)
	}}, nil)
	other := dial(t, ts.addr)
	other.send(post("/fast", "before"))
	resp, body := other.read()
	expect(t, resp, body, "fast", "before")

	c := dial(t, ts.addr)
	c.send(post("/fast/panic", ""))
	c.expectClosed()
	poll(t, "panic logged", func() bool { return strings.Contains(ts.log.String(), "test panic") })

	c = dial(t, ts.addr)
	c.send(post("/fast/abort", ""))
	c.expectClosed()

	other.send(post("/fast", "after"))
	resp, body = other.read()
	expect(t, resp, body, "fast", "after")
	c = dial(t, ts.addr)
	c.send(post("/fast", "new"))
	resp, body = c.read()
	expect(t, resp, body, "fast", "new")
	if strings.Contains(ts.log.String(), "abort") {
		t.Fatalf("ErrAbortHandler logged: %s", ts.log)
	}
}

// shortTimeout is the timeouts' setting in tests: long enough for a
// loaded machine to send a request in time, short enough to wait out.
const shortTimeout = 400 * time.Millisecond

func TestReadHeaderTimeout(t *testing.T) {
	ts := start(t, &handler{}, func(hs *http.Server) { hs.ReadHeaderTimeout = shortTimeout })
	t.Run("partial head", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send("POST /fast HTTP/1.1\r\nHost: te")
		c.expectClosed()
	})
	t.Run("partial next head", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send(post("/fast", "one") + "POST /fast HTTP/1.1\r\n")
		resp, body := c.read()
		expect(t, resp, body, "fast", "one")
		c.expectClosed()
	})
	// As net/http: a new connection has the header timeout to send its
	// first head.
	t.Run("silent connection", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.expectClosed()
	})
	// The header timeout bounds the head only: a slow body is read.
	t.Run("slow body", func(t *testing.T) {
		for _, first := range []string{"", post("/fast", "first")} {
			for _, split := range []bool{false, true} {
				c := dial(t, ts.addr)
				if first != "" {
					c.send(first)
					resp, body := c.read()
					expect(t, resp, body, "fast", "first")
				}
				head := "POST /fast HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\n"
				if split {
					c.send(head[:10])
					head = head[10:]
				}
				c.send(head + "sl")
				time.Sleep(2 * shortTimeout)
				c.send("ow")
				resp, body := c.read()
				expect(t, resp, body, "fast", "slow")
			}
		}
	})
}

func TestIdleTimeout(t *testing.T) {
	for _, tt := range []struct {
		name      string
		configure func(*http.Server)
	}{
		{"IdleTimeout", func(hs *http.Server) { hs.IdleTimeout = shortTimeout }},
		{"ReadTimeout", func(hs *http.Server) { hs.ReadTimeout = shortTimeout }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := start(t, &handler{}, tt.configure)
			c := dial(t, ts.addr)
			c.send(post("/fast", "one"))
			resp, body := c.read()
			expect(t, resp, body, "fast", "one")
			c.expectClosed()
			// The idle timeout is for the wait between requests, not a
			// body that comes slowly.
			c = dial(t, ts.addr)
			c.send("POST /fast HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\nsl")
			time.Sleep(2 * shortTimeout)
			c.send("ow")
			resp, body = c.read()
			expect(t, resp, body, "fast", "slow")
		})
	}
}

// holdHandler blocks /fast/hold exchanges until release is closed.
type holdHandler struct {
	entered chan struct{}
	release chan struct{}
	done    chan struct{} // closed as the held handler returns
}

func newHoldHandler() *holdHandler {
	return &holdHandler{entered: make(chan struct{}, 1), release: make(chan struct{}), done: make(chan struct{})}
}

func (h *holdHandler) handler(t *testing.T) *handler {
	return &handler{serve: func(x *Exchange) {
		if string(x.Head.Path) != "/fast/hold" {
			echo(x)
			return
		}
		defer close(h.done)
		h.entered <- struct{}{}
		if !await(t, h.release, "release") {
			return
		}
		echo(x)
	}}
}

func TestShutdown(t *testing.T) {
	hold := newHoldHandler()
	ts := start(t, hold.handler(t), nil)

	idle := dial(t, ts.addr)
	idle.send(post("/fast", "idle"))
	resp, body := idle.read()
	expect(t, resp, body, "fast", "idle")
	silent := dial(t, ts.addr)
	handed := dial(t, ts.addr)
	handed.send(get("/handed"))
	resp, body = handed.read()
	expect(t, resp, body, "fallback", "")

	busy := dial(t, ts.addr)
	busy.send(post("/fast/hold", "held"))
	within(t, hold.entered, "held exchange")

	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(context.Background()) }()
	poll(t, "shutting down", ts.shuttingDown)

	// Idle connections close at once.
	idle.expectClosed()
	silent.expectClosed()
	if _, err := net.DialTimeout("tcp", ts.addr, wait); err == nil {
		t.Fatal("dial after Shutdown succeeded")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with an exchange running", err)
	default:
	}

	close(hold.release)
	resp, body = busy.read()
	expect(t, resp, body, "fast", "held")
	if !resp.Close {
		t.Fatal("the answer during Shutdown lacks Connection: close")
	}
	busy.expectClosed()
	// The fallback is shut down after the fast path's exchanges.
	handed.expectClosed()
	if err := within(t, shut, "Shutdown"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-hold.done:
	default:
		t.Fatal("Shutdown returned before the exchange ended")
	}
	if err := within(t, ts.served, "Serve"); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
	ts.served <- http.ErrServerClosed // for the cleanup's check
}

// TestShutdownTimeout: the context bounds Shutdown, after which the
// connections left are closed; Close may follow.
func TestShutdownTimeout(t *testing.T) {
	hold := newHoldHandler()
	ts := start(t, hold.handler(t), nil)
	busy := dial(t, ts.addr)
	busy.send(post("/fast/hold", "held"))
	within(t, hold.entered, "held exchange")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	busy.expectClosed()
	close(hold.release)
	within(t, hold.done, "handler return")
}

// TestShutdownFallbackBusy: a handed-over connection still busy when the
// context ends; the caller's Close after the failed Shutdown returns.
func TestShutdownFallbackBusy(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	ts := start(t, &handler{}, func(hs *http.Server) {
		hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
	})
	c := dial(t, ts.addr)
	c.send(get("/busy"))
	within(t, entered, "fallback handler")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want context.DeadlineExceeded", err)
	}
	close(release)
	// The cleanup's Close must return (mentatd-serve calls Close after a
	// failed Shutdown).
}

func TestShutdownThenClose(t *testing.T) {
	ts := start(t, &handler{}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast", "x"))
	c.read()
	if err := ts.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The cleanup's Close must return; so must a second one.
	done := make(chan struct{})
	go func() {
		ts.Close()
		close(done)
	}()
	within(t, done, "Close after Shutdown")
}

func TestClose(t *testing.T) {
	hold := newHoldHandler()
	ts := start(t, hold.handler(t), nil)
	idle := dial(t, ts.addr)
	idle.send(post("/fast", "idle"))
	idle.read()
	handed := dial(t, ts.addr)
	handed.send(get("/handed"))
	handed.read()
	busy := dial(t, ts.addr)
	busy.send(post("/fast/hold", "held"))
	within(t, hold.entered, "held exchange")
	if err := ts.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	idle.expectClosed()
	handed.expectClosed()
	busy.expectClosed()
	if err := within(t, ts.served, "Serve"); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
	ts.served <- http.ErrServerClosed
	close(hold.release)
	within(t, hold.done, "handler return")
}

func TestShutdownBeforeServe(t *testing.T) {
	s := &Server{Handler: &handler{}, Fallback: &http.Server{}}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

// TestListenerError: Serve returns a failed listener's error; Close then
// ends the fallback.
func TestListenerError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: &handler{}, Fallback: &http.Server{}}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	c := dial(t, ln.Addr().String())
	c.send(post("/fast", "x"))
	c.read()
	ln.Close()
	if err := within(t, served, "Serve"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve: %v, want the listener's error", err)
	}
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	within(t, done, "Close")
	c.expectClosed()
}
