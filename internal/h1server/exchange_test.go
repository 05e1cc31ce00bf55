package h1server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestChunkedFlush: each flushed chunk reaches the client while the
// handler still runs.
func TestChunkedFlush(t *testing.T) {
	const chunks = 5
	next := make(chan struct{})
	returned := make(chan struct{}, 2)
	ts := start(t, &handler{serve: func(x *Exchange) {
		defer func() { returned <- struct{}{} }()
		if err := x.WriteHead(Response{Status: http.StatusOK, ContentLength: -1, Header: []byte("X-Served: fast\r\n")}); err != nil {
			t.Error(err)
			return
		}
		for i := range chunks {
			if _, err := x.Write([]byte("chunk" + strconv.Itoa(i))); err != nil {
				t.Error(err)
				return
			}
			if err := x.Flush(); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-next:
			case <-time.After(wait):
				t.Error("client did not ask for the next chunk")
				return
			}
		}
		if x.Written() != int64(chunks*len("chunk0")) || !x.HeadWritten() {
			t.Errorf("Written %d HeadWritten %v", x.Written(), x.HeadWritten())
		}
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast/stream", ""))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || resp.ContentLength != -1 {
		t.Fatalf("framing: %v %d", resp.TransferEncoding, resp.ContentLength)
	}
	for i := range chunks {
		want := "chunk" + strconv.Itoa(i)
		buf := make([]byte, len(want))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != want {
			t.Fatalf("chunk %d: %q %v", i, buf, err)
		}
		if len(returned) > 0 {
			t.Fatalf("handler returned before the client read chunk %d", i)
		}
		next <- struct{}{}
	}
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after the chunks: %q %v", rest, err)
	}
	within(t, returned, "handler return")
	// The terminator was written: the connection carries the next one.
	c.send(post("/fast/stream", ""))
	go func() {
		for range chunks {
			next <- struct{}{}
		}
	}()
	resp, body := c.read()
	if resp.StatusCode != 200 || body != "chunk0chunk1chunk2chunk3chunk4" {
		t.Fatalf("second stream: %d %q", resp.StatusCode, body)
	}
}

// TestChunkedUnflushed: a chunked answer the handler never flushes is
// terminated after it returns.
func TestChunkedUnflushed(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		_ = x.WriteHead(Response{Status: http.StatusOK, ContentLength: -1, Header: []byte("X-Served: fast\r\n")})
		_, _ = x.Write([]byte("a"))
		_, _ = x.Write(nil) // an empty write is no chunk (it would end the body)
		_, _ = x.Write(bytes.Repeat([]byte("b"), 3*bufSize))
	}}, nil)
	c := dial(t, ts.addr)
	for range 2 {
		c.send(post("/fast", ""))
		resp, body := c.read()
		expect(t, resp, body, "fast", "a"+strings.Repeat("b", 3*bufSize))
	}
}

func TestNoBodyStatuses(t *testing.T) {
	for _, status := range []int{http.StatusNoContent, http.StatusNotModified} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var werr atomic.Value
			ts := start(t, &handler{serve: func(x *Exchange) {
				if x.Head.Get("X-Plain") != nil {
					echo(x)
					return
				}
				_ = x.WriteHead(Response{Status: status, ContentLength: 5, Header: []byte("X-Served: fast\r\n")})
				_, err := x.Write([]byte("hello"))
				werr.Store(fmt.Sprint(err))
			}}, nil)
			c := dial(t, ts.addr)
			c.send(post("/fast", ""))
			// Read the raw head: no framing field may be there.
			var head strings.Builder
			for {
				line, err := c.br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				head.WriteString(line)
				if line == "\r\n" {
					break
				}
			}
			h := head.String()
			if !strings.HasPrefix(h, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+"\r\n") ||
				strings.Contains(h, "Content-Length") || strings.Contains(h, "Transfer-Encoding") {
				t.Fatalf("head %q", h)
			}
			if w := werr.Load(); w != http.ErrBodyNotAllowed.Error() {
				t.Fatalf("Write after %d: %v, want ErrBodyNotAllowed", status, w)
			}
			// No body bytes: the next answer follows directly.
			c.send(post("/fast", "next", "X-Plain: 1"))
			resp, body := c.read()
			expect(t, resp, body, "fast", "next")
		})
	}
}

func TestDate(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		if x.Head.Get("X-Has-Date") != nil {
			_ = x.WriteHead(Response{Status: 200, Header: []byte("Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n"), HasDate: true})
			return
		}
		_ = x.WriteHead(Response{Status: 200})
	}}, nil)
	c := dial(t, ts.addr)
	before := time.Now().Add(-time.Second)
	c.send(post("/fast", ""))
	resp, _ := c.read()
	d, err := http.ParseTime(resp.Header.Get("Date"))
	if len(resp.Header.Values("Date")) != 1 || err != nil || d.Before(before.Truncate(time.Second)) || d.After(time.Now().Add(time.Second)) {
		t.Fatalf("Date %q (%v), want one for now", resp.Header.Values("Date"), err)
	}
	c.send(post("/fast", "", "X-Has-Date: 1"))
	resp, _ = c.read()
	if v := resp.Header.Values("Date"); len(v) != 1 || v[0] != "Mon, 02 Jan 2006 15:04:05 GMT" {
		t.Fatalf("Date %q, want the handler's only", v)
	}
}

func TestWriteErrors(t *testing.T) {
	errs := make(chan [4]error, 1)
	ts := start(t, &handler{serve: func(x *Exchange) {
		var e [4]error
		_, e[0] = x.Write([]byte("early"))
		_ = x.WriteHead(Response{Status: 200, ContentLength: 3, Header: []byte("X-Served: fast\r\n")})
		e[1] = x.WriteHead(Response{Status: 500})
		_, e[2] = x.Write([]byte("toolong"))
		_, e[3] = x.Write([]byte("abc"))
		errs <- e
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast", ""))
	resp, body := c.read()
	e := within(t, errs, "handler errors")
	if e[0] != ErrNoHead || e[1] != ErrHeadWritten || e[2] != ErrBodyTooLong || e[3] != nil {
		t.Fatalf("errors %v, want ErrNoHead ErrHeadWritten ErrBodyTooLong nil", e)
	}
	expect(t, resp, body, "fast", "abc")
	c.send(post("/fast", ""))
	resp, body = c.read()
	expect(t, resp, body, "fast", "abc")
}

// TestNoHead: a handler that answers nothing gets a 500 for it.
func TestNoHead(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {}}, nil)
	c := dial(t, ts.addr)
	for range 2 {
		c.send(post("/fast", "x"))
		resp, body := c.read()
		if resp.StatusCode != http.StatusInternalServerError || body != "" || resp.Close {
			t.Fatalf("got %d %q close %v", resp.StatusCode, body, resp.Close)
		}
	}
}

// TestShortAnswer: an answer shorter than its Content-Length ends the
// connection: the client never takes it for a whole one.
func TestShortAnswer(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		_ = x.WriteHead(Response{Status: 200, ContentLength: 10})
		_, _ = x.Write([]byte("abc"))
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast", ""))
	resp, body, err := c.tryRead()
	if err == nil {
		t.Fatalf("a cut answer read as whole: %d %q", resp.StatusCode, body)
	}
	if !isClosedErr(err) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read: %v, want the connection closed", err)
	}
}

func TestAbort(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		if x.Head.Get("X-Before-Head") != nil {
			x.Abort()
			return
		}
		_ = x.WriteHead(Response{Status: 200, ContentLength: 10})
		_, _ = x.Write([]byte("part"))
		_ = x.Flush()
		x.Abort()
		if _, err := x.Write([]byte("more")); err == nil {
			t.Error("Write after Abort succeeded")
		}
		if err := x.Flush(); err == nil {
			t.Error("Flush after Abort succeeded")
		}
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast", ""))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); string(b) != "part" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("body %q %v, want the flushed part then a cut", b, err)
	}
	c2 := dial(t, ts.addr)
	c2.send(post("/fast", "", "X-Before-Head: 1"))
	c2.expectClosed()
}

func TestCloseAfter(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		if x.Head.Get("X-Close") != nil {
			x.CloseAfter()
		}
		echo(x)
	}}, nil)
	t.Run("handler", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send(post("/fast", "bye", "X-Close: 1"))
		resp, body := c.read()
		expect(t, resp, body, "fast", "bye")
		if !resp.Close {
			t.Fatal("no Connection: close")
		}
		c.expectClosed()
	})
	t.Run("client", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send(post("/fast", "bye", "Connection: close") + post("/fast", "never"))
		resp, body := c.read()
		expect(t, resp, body, "fast", "bye")
		if !resp.Close {
			t.Fatal("no Connection: close")
		}
		c.expectClosed()
	})
}

// TestUnreadBody: a small buffered rest of the body is skipped and the
// connection kept; a large one ends the connection after the answer.
func TestUnreadBody(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		var two [2]byte
		if _, err := io.ReadFull(x, two[:]); err != nil {
			x.Abort()
			return
		}
		if x.Head.Get("X-Buffered") != nil && !x.BodyBuffered() {
			t.Error("BodyBuffered false for a body sent with its head")
		}
		_ = x.WriteHead(Response{Status: 200, ContentLength: 2, Header: []byte("X-Served: fast\r\n")})
		_, _ = x.Write(two[:])
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast", "ab"+strings.Repeat("x", 1000), "X-Buffered: 1") + post("/fast", "cd"))
	resp, body := c.read()
	expect(t, resp, body, "fast", "ab")
	resp, body = c.read()
	expect(t, resp, body, "fast", "cd")

	c = dial(t, ts.addr)
	large := "ef" + strings.Repeat("y", 1<<20)
	go func() { _, _ = io.WriteString(c.nc, post("/fast", large)) }()
	resp, body = c.read()
	expect(t, resp, body, "fast", "ef")
	c.expectClosed()
}

// TestBodyCut: a client that hangs up mid-body gets its exchange ended
// with an error, and the connection closed.
func TestBodyCut(t *testing.T) {
	errs := make(chan error, 1)
	ts := start(t, &handler{serve: func(x *Exchange) {
		_, err := io.ReadAll(x)
		errs <- err
		_ = x.WriteHead(Response{Status: 400})
	}}, nil)
	c := dial(t, ts.addr)
	c.send("POST /fast HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\nonly-this")
	_ = c.nc.(*net.TCPConn).CloseWrite()
	if err := within(t, errs, "body read"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("body read: %v, want io.ErrUnexpectedEOF", err)
	}
	resp, _ := c.read()
	if resp.StatusCode != 400 || !resp.Close {
		t.Fatalf("got %d close %v", resp.StatusCode, resp.Close)
	}
	c.expectClosed()
}

// TestHeadBuffered: Take learns whether the whole body came with the
// head.
func TestHeadBuffered(t *testing.T) {
	type seen struct{ buffered, length int64 }
	heads := make(chan seen, 4)
	ts := start(t, &handler{take: func(h *Head) bool {
		heads <- seen{h.Buffered, h.ContentLength}
		return true
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast", "whole"))
	c.read()
	if s := within(t, heads, "Take"); s.buffered != 5 || s.length != 5 {
		t.Fatalf("whole body: Buffered %d of %d", s.buffered, s.length)
	}
	c.send("POST /fast HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n")
	s := within(t, heads, "Take")
	c.send("later")
	c.read()
	if s.buffered != 0 || s.length != 5 {
		t.Fatalf("body sent later: Buffered %d of %d", s.buffered, s.length)
	}
}

func TestRemoteAddr(t *testing.T) {
	addrs := make(chan string, 1)
	ts := start(t, &handler{serve: func(x *Exchange) {
		addrs <- x.RemoteAddr().String()
		echo(x)
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast", ""))
	c.read()
	if got := within(t, addrs, "remote addr"); got != c.nc.LocalAddr().String() {
		t.Fatalf("RemoteAddr %s, want %s", got, c.nc.LocalAddr())
	}
}

// recWatcher records the calls of one exchange's watch.
type recWatcher struct {
	mu       sync.Mutex
	calls    []string
	returned bool // the handler returned
	late     []string
	slow     chan struct{}
	gone     chan struct{}
}

func newRecWatcher() *recWatcher {
	return &recWatcher{slow: make(chan struct{}, 1), gone: make(chan struct{}, 1)}
}

func (w *recWatcher) record(call string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, call)
	if w.returned {
		w.late = append(w.late, call)
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (w *recWatcher) Slow() { w.record("slow", w.slow) }
func (w *recWatcher) Gone() { w.record("gone", w.gone) }

// markReturned is the handler's last act.
func (w *recWatcher) markReturned() {
	w.mu.Lock()
	w.returned = true
	w.mu.Unlock()
}

func (w *recWatcher) result() (calls, late []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...), append([]string(nil), w.late...)
}

// TestWatchGone: a client that hangs up on a slow exchange is heard of:
// Slow first, then Gone.
func TestWatchGone(t *testing.T) {
	watchers := make(chan *recWatcher, 1)
	returned := make(chan struct{})
	ts := start(t, &handler{serve: func(x *Exchange) {
		defer close(returned)
		if _, err := io.ReadAll(x); err != nil {
			t.Error(err)
		}
		w := newRecWatcher()
		x.Watch(time.Now().Add(time.Minute), w)
		watchers <- w
		select {
		case <-w.gone:
			x.Abort()
		case <-time.After(wait):
			t.Error("Gone not called")
		}
		w.markReturned()
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast/slow", "body"))
	w := within(t, watchers, "handler start")
	within(t, w.slow, "Slow")
	c.nc.Close()
	within(t, returned, "handler return")
	if calls, late := w.result(); strings.Join(calls, ",") != "slow,gone" || len(late) != 0 {
		t.Fatalf("calls %v (late %v), want slow,gone", calls, late)
	}
}

// TestWatchBodyUnread: Watch is a no-op while the body is unread (the
// watch's read would take body bytes).
func TestWatchBodyUnread(t *testing.T) {
	w := newRecWatcher()
	proceed := make(chan struct{})
	ts := start(t, &handler{serve: func(x *Exchange) {
		x.Watch(time.Time{}, w)
		<-proceed
		echo(x)
	}}, nil)
	c := dial(t, ts.addr)
	c.send("POST /fast HTTP/1.1\r\nHost: test\r\nContent-Length: 6\r\n\r\nbod")
	// Give a watch every chance to run (a wrong one would eat "y!").
	time.Sleep(50 * watchDelay)
	c.send("y!!")
	close(proceed)
	resp, body := c.read()
	expect(t, resp, body, "fast", "body!!")
	if calls, _ := w.result(); len(calls) != 0 {
		t.Fatalf("watcher called: %v", calls)
	}
}

// TestWatchNotAfterReturn: many short watched exchanges, some outliving
// the watch delay, whose clients hang up as soon as they have their
// answer: no watcher is called once its handler returned (those that
// flush their answer themselves end the watch with Unwatch).
func TestWatchNotAfterReturn(t *testing.T) {
	var mu sync.Mutex
	var all []*recWatcher
	ts := start(t, &handler{serve: func(x *Exchange) {
		if _, err := io.ReadAll(x); err != nil {
			x.Abort()
			return
		}
		w := newRecWatcher()
		mu.Lock()
		all = append(all, w)
		mu.Unlock()
		defer w.markReturned()
		x.Watch(time.Now().Add(time.Minute), w)
		flush := x.Head.Get("X-Flush") != nil
		if flush {
			// The client may hang up as soon as it has the answer,
			// before the server ends the watch after the return.
			defer x.Unwatch()
		}
		if x.Head.Get("X-Wait-Slow") != nil {
			select {
			case <-w.slow:
			case <-time.After(wait):
				t.Error("Slow not called")
			}
		}
		_ = x.WriteHead(Response{Status: 200, ContentLength: 2, Header: []byte("X-Served: fast\r\n")})
		_, _ = x.Write([]byte("ok"))
		if flush {
			_ = x.Flush()
		}
	}}, nil)
	const conns, perConn = 60, 4
	for i := range conns {
		c := dial(t, ts.addr)
		for j := range perConn {
			var fields []string
			if (i+j)%2 == 0 {
				fields = append(fields, "X-Wait-Slow: 1")
			}
			if i%3 != 0 {
				fields = append(fields, "X-Flush: 1")
			}
			c.send(post("/fast", "x", fields...))
			resp, body := c.read()
			expect(t, resp, body, "fast", "ok")
		}
		c.nc.Close()
	}
	// Let the last hang-ups be read before looking.
	poll(t, "connections closed", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return len(ts.conns) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(all) != conns*perConn {
		t.Fatalf("%d exchanges, want %d", len(all), conns*perConn)
	}
	for i, w := range all {
		if calls, late := w.result(); len(late) != 0 {
			t.Fatalf("exchange %d: calls %v, after return %v", i, calls, late)
		}
	}
}

// TestUnwatch: after Unwatch a hang-up is not heard of, and a byte the
// ended watch read is replayed.
func TestUnwatch(t *testing.T) {
	unwatched := make(chan *recWatcher, 1)
	returned := make(chan []string, 1)
	ts := start(t, &handler{serve: func(x *Exchange) {
		if string(x.Head.Path) != "/fast/slow" {
			echo(x)
			return
		}
		_, _ = io.ReadAll(x)
		w := newRecWatcher()
		x.Watch(time.Time{}, w)
		if !await(t, w.slow, "Slow") {
			x.Abort()
			return
		}
		x.Unwatch()
		x.Unwatch() // twice is fine
		unwatched <- w
		// The client now sends its next request's start, or hangs up:
		// nothing may be heard of either.
		select {
		case <-w.gone:
		case <-time.After(100 * time.Millisecond):
		}
		calls, _ := w.result()
		returned <- calls
		_ = x.WriteHead(Response{Status: 200, ContentLength: 5, Header: []byte("X-Served: fast\r\n")})
		_, _ = x.Write([]byte("first"))
	}}, nil)

	c := dial(t, ts.addr)
	c.send(post("/fast/slow", ""))
	within(t, unwatched, "Unwatch")
	c.nc.Close()
	if calls := within(t, returned, "handler"); strings.Join(calls, ",") != "slow" {
		t.Fatalf("calls %v after Unwatch and a hang-up, want slow", calls)
	}

	c = dial(t, ts.addr)
	c.send(post("/fast/slow", ""))
	within(t, unwatched, "Unwatch")
	c.send(post("/fast/next", "second"))
	if calls := within(t, returned, "handler"); strings.Join(calls, ",") != "slow" {
		t.Fatalf("calls %v, want slow", calls)
	}
	resp, body := c.read()
	expect(t, resp, body, "fast", "first")
	resp, body = c.read()
	expect(t, resp, body, "fast", "second")
}

// TestWatchPipelined: the byte the watch read from a client that sent
// its next request early is that request's first, replayed.
func TestWatchPipelined(t *testing.T) {
	for _, next := range []struct{ name, req, served, body string }{
		{"fast", post("/fast/next", "second"), "fast", "second"},
		{"declined", get("/declined"), "fallback", ""},
	} {
		t.Run(next.name, func(t *testing.T) {
			slowSeen := make(chan struct{})
			ts := start(t, &handler{serve: func(x *Exchange) {
				if string(x.Head.Path) != "/fast/slow" {
					echo(x)
					return
				}
				_, _ = io.ReadAll(x)
				w := newRecWatcher()
				x.Watch(time.Time{}, w)
				if !await(t, w.slow, "Slow") {
					x.Abort()
					return
				}
				close(slowSeen)
				// The watch reads the next request's first byte.
				if !awaitCond(t, "watch read", x.c.watch.hasSaved.Load) {
					x.Abort()
					return
				}
				_ = x.WriteHead(Response{Status: 200, ContentLength: 5, Header: []byte("X-Served: fast\r\n")})
				_, _ = x.Write([]byte("first"))
				if calls, _ := w.result(); len(calls) != 1 {
					t.Errorf("calls %v, want slow only", calls)
				}
			}}, nil)
			c := dial(t, ts.addr)
			c.send(post("/fast/slow", "1"))
			within(t, slowSeen, "slow exchange watched")
			c.send(next.req)
			resp, body := c.read()
			expect(t, resp, body, "fast", "first")
			resp, body = c.read()
			expect(t, resp, body, next.served, next.body)
			// And the connection goes on.
			c.send(post("/fast/third", "third"))
			resp, body = c.read()
			expect(t, resp, body, next.served, "third")
		})
	}
}

// TestWatchBuffered: with the next request already buffered the watch
// reads nothing, and both are answered.
func TestWatchBuffered(t *testing.T) {
	ts := start(t, &handler{serve: func(x *Exchange) {
		if string(x.Head.Path) != "/fast/slow" {
			echo(x)
			return
		}
		_, _ = io.ReadAll(x)
		w := newRecWatcher()
		x.Watch(time.Time{}, w)
		if !await(t, w.slow, "Slow") {
			x.Abort()
			return
		}
		if x.c.watch.hasSaved.Load() {
			t.Error("watch read from a connection with buffered bytes")
		}
		_ = x.WriteHead(Response{Status: 200, ContentLength: 5, Header: []byte("X-Served: fast\r\n")})
		_, _ = x.Write([]byte("first"))
	}}, nil)
	c := dial(t, ts.addr)
	c.send(post("/fast/slow", "1") + post("/fast", "second"))
	resp, body := c.read()
	expect(t, resp, body, "fast", "first")
	resp, body = c.read()
	expect(t, resp, body, "fast", "second")
}

// TestWatchWriteDeadline: once slow, a watched exchange's writes are
// bounded by its write deadline; the next exchange's are not.
func TestWatchWriteDeadline(t *testing.T) {
	werr := make(chan error, 1)
	deadlines := make(chan time.Time, 1)
	ts := start(t, &handler{serve: func(x *Exchange) {
		switch string(x.Head.Path) {
		case "/fast/stuck":
			_, _ = io.ReadAll(x)
			w := newRecWatcher()
			x.Watch(time.Now().Add(200*time.Millisecond), w)
			if !await(t, w.slow, "Slow") {
				x.Abort()
				return
			}
			_ = x.WriteHead(Response{Status: 200, ContentLength: 1 << 40})
			chunk := make([]byte, 64<<10)
			var err error
			for i := 0; i < 4096 && err == nil; i++ { // at most 256 MiB
				_, err = x.Write(chunk)
			}
			werr <- err
		case "/fast/quick":
			w := newRecWatcher()
			deadline := time.Now().Add(200 * time.Millisecond)
			deadlines <- deadline
			if !x.BodyBuffered() {
				t.Error("a one-byte body sent with its head is not buffered")
			}
			var q [1]byte
			_, _ = io.ReadFull(x, q[:])
			x.Watch(deadline, w)
			if !await(t, w.slow, "Slow") {
				x.Abort()
				return
			}
			_ = x.WriteHead(Response{Status: 200, ContentLength: 1, Header: []byte("X-Served: fast\r\n")})
			_, _ = x.Write(q[:])
		default:
			echo(x)
		}
	}}, nil)

	c := dial(t, ts.addr)
	c.send(post("/fast/stuck", "")) // and never read
	if err := within(t, werr, "write error"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a client that does not read: %v, want a deadline error", err)
	}

	c = dial(t, ts.addr)
	c.send(post("/fast/quick", "q"))
	resp, body := c.read()
	expect(t, resp, body, "fast", "q")
	// Past the first exchange's write deadline, the next one writes.
	time.Sleep(time.Until(within(t, deadlines, "deadline")) + 50*time.Millisecond)
	c.send(post("/fast", "after"))
	resp, body = c.read()
	expect(t, resp, body, "fast", "after")
}
