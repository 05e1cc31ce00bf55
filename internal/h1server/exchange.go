package h1server

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of Exchange's response methods.
var (
	// ErrHeadWritten is returned by a second WriteHead.
	ErrHeadWritten = errors.New("h1server: response head already written")
	// ErrNoHead is returned by Write before WriteHead.
	ErrNoHead = errors.New("h1server: response body written before its head")
	// ErrBodyTooLong is returned by a Write past the declared length.
	ErrBodyTooLong = errors.New("h1server: response body longer than its Content-Length")
)

// Response is a response head.
type Response struct {
	Status int
	// Header holds whole field lines ("Name: value\r\n") the handler
	// vouches for; never framing fields (Content-Length,
	// Transfer-Encoding, Connection), which the exchange writes.
	Header []byte
	// ContentLength is the body's length; negative means unknown, sent
	// chunked.
	ContentLength int64
	// HasDate is set when Header holds a Date field (a proxy passing on
	// its upstream's); otherwise the exchange adds one.
	HasDate bool
}

// Exchange is one request and its response on a connection the fast
// path serves. Its methods are for the handler's goroutine, except
// Watch's callback, which runs on another.
type Exchange struct {
	Head Head

	c        *conn
	bodyLeft int64
	bodyErr  error

	wroteHead bool
	chunked   bool
	noBody    bool
	left      int64 // declared bytes still to write; -1 when chunked
	written   int64
	werr      error
	close     bool // close the connection after this exchange
}

// RemoteAddr is the client's address.
func (x *Exchange) RemoteAddr() net.Addr { return x.c.nc.RemoteAddr() }

// Read reads the request body; io.EOF at its end. A connection that
// fails mid-body is closed after the exchange.
func (x *Exchange) Read(p []byte) (int, error) {
	if x.bodyErr != nil {
		return 0, x.bodyErr
	}
	if x.bodyLeft == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > x.bodyLeft {
		p = p[:x.bodyLeft]
	}
	n, err := x.c.br.Read(p)
	x.bodyLeft -= int64(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		x.bodyErr, x.close = err, true
		if n > 0 {
			return n, nil
		}
		return 0, err
	}
	return n, nil
}

// BodyBuffered reports whether the rest of the request body is already in
// memory, so reading it cannot block.
func (x *Exchange) BodyBuffered() bool { return int64(x.c.br.Buffered()) >= x.bodyLeft }

// WriteHead writes the response's status line and header into the
// connection's buffer.
func (x *Exchange) WriteHead(r Response) error {
	if x.wroteHead {
		return ErrHeadWritten
	}
	x.wroteHead = true
	w := x.c.bw
	b := w.AvailableBuffer()
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(r.Status)...)
	b = append(b, "\r\n"...)
	b = append(b, r.Header...)
	if !r.HasDate {
		b = append(b, "Date: "...)
		b = appendDate(b)
		b = append(b, "\r\n"...)
	}
	x.noBody = r.Status < 200 || r.Status == http.StatusNoContent || r.Status == http.StatusNotModified
	switch {
	case x.noBody:
		x.left = 0
	case r.ContentLength >= 0:
		x.left = r.ContentLength
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, r.ContentLength, 10)
		b = append(b, "\r\n"...)
	default:
		x.chunked, x.left = true, -1
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if x.close || x.c.srv.shuttingDown() {
		x.close = true
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	_, err := w.Write(b)
	return x.fail(err)
}

// Write writes response body bytes into the connection's buffer (framed
// as a chunk when the length is unknown); large writes go straight to the
// connection.
func (x *Exchange) Write(p []byte) (int, error) {
	switch {
	case x.werr != nil:
		return 0, x.werr
	case !x.wroteHead:
		return 0, ErrNoHead
	case len(p) == 0:
		return 0, nil
	case x.noBody:
		return 0, http.ErrBodyNotAllowed
	case x.chunked:
		w := x.c.bw
		b := w.AvailableBuffer()
		b = strconv.AppendInt(b, int64(len(p)), 16)
		b = append(b, "\r\n"...)
		if _, err := w.Write(b); err != nil {
			return 0, x.fail(err)
		}
		n, err := w.Write(p)
		if err == nil {
			_, err = w.WriteString("\r\n")
		}
		x.written += int64(n)
		return n, x.fail(err)
	}
	if int64(len(p)) > x.left {
		return 0, ErrBodyTooLong
	}
	n, err := x.c.bw.Write(p)
	x.left -= int64(n)
	x.written += int64(n)
	return n, x.fail(err)
}

// Flush sends what is buffered.
func (x *Exchange) Flush() error {
	if x.werr != nil {
		return x.werr
	}
	return x.fail(x.c.bw.Flush())
}

// Written is the count of body bytes written.
func (x *Exchange) Written() int64 { return x.written }

// HeadWritten reports whether WriteHead was called.
func (x *Exchange) HeadWritten() bool { return x.wroteHead }

// Abort ends the exchange by closing the connection once the handler
// returns, without completing the response: a client must not take a cut
// answer for a whole one.
func (x *Exchange) Abort() { x.close, x.werr = true, errAborted }

var errAborted = errors.New("h1server: exchange aborted")

// CloseAfter closes the connection once this exchange is complete (the
// rest of a refused request body is not read).
func (x *Exchange) CloseAfter() { x.close = true }

func (x *Exchange) fail(err error) error {
	if err != nil && x.werr == nil {
		x.werr, x.close = err, true
	}
	return err
}

// finish completes the response and reports whether the connection can
// carry another request.
func (x *Exchange) finish() bool {
	if !x.wroteHead && x.werr == nil {
		_ = x.WriteHead(Response{Status: http.StatusInternalServerError, ContentLength: 0})
	}
	if x.werr == nil && x.chunked {
		_, err := x.c.bw.WriteString("0\r\n\r\n")
		x.fail(err)
	}
	if x.werr == nil && x.left > 0 {
		// Shorter than declared: the client must see the cut.
		x.close = true
		return false
	}
	if x.werr == nil {
		x.fail(x.c.bw.Flush())
	}
	if x.close || x.werr != nil {
		return false
	}
	// An unread rest of the body is drained when small; otherwise the
	// connection cannot be read at the next request's start.
	if x.bodyLeft > 0 {
		if x.bodyLeft > maxDrain || !x.BodyBuffered() {
			return false
		}
		if _, err := x.c.br.Discard(int(x.bodyLeft)); err != nil {
			return false
		}
	}
	return true
}

// maxDrain is the most unread request body discarded to keep a
// connection open.
const maxDrain = 256 << 10

// Watcher hears of an exchange that outlives watchDelay. Its methods run
// on another goroutine than the handler's, never after Unwatch returned
// nor once the exchange ended; they must be quick and safe to call while
// the handler runs. A call may still start as the handler returns (the
// hang-up can be read before the server ends the watch): a handler that
// recycles what its Watcher touches, such as a pooled state, calls
// Unwatch first.
type Watcher interface {
	// Slow runs once the exchange outlived watchDelay: the moment to set
	// the deadlines a short exchange is spared.
	Slow()
	// Gone runs when the client hung up.
	Gone()
}

// Watch asks to hear of the client hanging up while the response is
// pending, once the request body was read whole. Short exchanges cost
// nothing: only one still running after watchDelay starts a read on the
// connection (as net/http's background read does for every request), and
// only then is the write deadline set, so a client that stops reading
// cannot hold the exchange past writeDeadline.
func (x *Exchange) Watch(writeDeadline time.Time, w Watcher) {
	if x.bodyLeft > 0 || x.c.watch.armed {
		return
	}
	cw := &x.c.watch
	cw.mu.Lock()
	cw.armed, cw.fired, cw.w, cw.writeDeadline = true, false, w, writeDeadline
	cw.mu.Unlock()
	cw.timer.Reset(watchDelay)
}

// Unwatch ends the watch Watch started: once it returns, the Watcher is
// not called again. The exchange's end does the same, but only after the
// handler returned.
func (x *Exchange) Unwatch() { x.c.watch.disarm() }

// watchDelay is how long an exchange runs before its connection is
// watched for a hang-up.
const watchDelay = time.Millisecond

// watcher is a connection's hang-up watch. Its timer fires watch on its
// own goroutine.
type watcher struct {
	c             *conn
	timer         *time.Timer
	mu            sync.Mutex
	armed         bool // set by Watch, cleared by disarm
	fired         bool // watch ran for this exchange
	running       bool // watch is reading the connection
	writeDeadline time.Time
	wroteDeadline bool
	w             Watcher
	done          chan struct{}
	// saved is a byte the watch read: the start of the client's next
	// request, given back before anything else is read.
	saved    [1]byte
	hasSaved atomic.Bool
}

func (w *watcher) init(c *conn) {
	w.c, w.done = c, make(chan struct{}, 1)
	w.timer = time.AfterFunc(time.Hour, w.watch)
	w.timer.Stop()
}

// watch runs when an exchange outlived watchDelay: it calls Slow, sets
// the write deadline, and reads the connection until the client sends
// something, hangs up, or disarm expires the read.
func (w *watcher) watch() {
	w.mu.Lock()
	// A late run of an earlier exchange's timer may find this one armed
	// and act for it; the run of this one's then finds it done.
	if !w.armed || w.fired {
		w.mu.Unlock()
		return
	}
	w.fired = true
	w.w.Slow()
	nc := w.c.nc
	if !w.writeDeadline.IsZero() {
		_ = nc.SetWriteDeadline(w.writeDeadline)
		w.wroteDeadline = true
	}
	if w.hasSaved.Load() || w.c.br.Buffered() > 0 {
		// The client already sent more (pipelining): a read cannot tell
		// a hang-up, as with net/http.
		w.mu.Unlock()
		return
	}
	w.running = true
	_ = nc.SetReadDeadline(time.Time{})
	w.mu.Unlock()

	n, err := nc.Read(w.saved[:])

	w.mu.Lock()
	w.running = false
	armed := w.armed
	if n > 0 {
		w.hasSaved.Store(true)
	}
	if n == 0 && err != nil && armed && !isTimeout(err) {
		// Under the lock, so disarm cannot return while it runs: after
		// the exchange, whatever Gone acts on may belong to another.
		w.w.Gone()
	}
	if !armed {
		// disarm saw running and waits.
		w.done <- struct{}{}
	}
	w.mu.Unlock()
}

// disarm ends the watch: after it returns, nothing reads the connection
// but its own goroutine, and gone is not called.
func (w *watcher) disarm() {
	if !w.armed {
		return
	}
	// A watch may run even when this timer is stopped: a late run of an
	// earlier timer's (see watch). Running is what counts.
	w.timer.Stop()
	w.mu.Lock()
	w.armed, w.w = false, nil
	running := w.running
	if running {
		_ = w.c.nc.SetReadDeadline(aLongTimeAgo)
	}
	reset := w.wroteDeadline
	w.wroteDeadline = false
	w.mu.Unlock()
	if running {
		<-w.done
		_ = w.c.nc.SetReadDeadline(time.Time{})
	}
	if reset {
		_ = w.c.nc.SetWriteDeadline(time.Time{})
	}
}

var aLongTimeAgo = time.Unix(1, 0)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// date is the Date field's value for one second, shared.
type date struct {
	sec int64
	val []byte
}

var dates atomic.Pointer[date]

func appendDate(b []byte) []byte {
	now := time.Now()
	d := dates.Load()
	if d == nil || d.sec != now.Unix() {
		d = &date{sec: now.Unix(), val: now.UTC().AppendFormat(nil, http.TimeFormat)}
		dates.Store(d)
	}
	return append(b, d.val...)
}
