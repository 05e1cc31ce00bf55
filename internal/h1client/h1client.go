// Package h1client sends HTTP/1.1 requests with buffered bodies to plain
// HTTP servers over pooled keep-alive connections, entirely in the calling
// goroutine.
//
// net/http's Transport runs two goroutines per connection and hands every
// request and response between them and the caller over channels; for
// small requests to a local server, that machinery costs about as much CPU
// as a proxy's own work. Here one request is one write and the reads of
// its answer, nothing else. The rules the Transport keeps still hold:
//
//   - Sent once: a request is re-sent (on another connection) only when
//     not one byte of it was written. Before reuse, a pooled connection is
//     checked for a close or stray bytes from the server, so a connection
//     the server dropped while idle is never written to.
//   - Idle connections are closed after Options.IdleTimeout by one sweeper
//     goroutine that runs only while the pool holds connections.
//   - No timeout but the request context's, the dial's and, when set, the
//     response header's: the context's end expires the connection's
//     deadlines, which ends any read or write at once, and the connection
//     is closed.
//
// A buffered body (Request.Body) is written before the answer is read. A
// streamed one (Request.BodyReader) is copied by one goroutine while the
// caller's reads the answer, so a server answering before the body ends
// (its deadline cut a client trickling it) is heard at once.
package h1client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Defaults for Options.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultIdleTimeout    = 2 * time.Second
	DefaultMaxIdlePerHost = 256
	// DefaultUserAgent is net/http's, so a server sees the same request
	// it saw from a Transport.
	DefaultUserAgent = "Go-http-client/1.1"
)

// bufSize is a pooled connection's read buffer. Callers read bodies
// through their own buffers (reads that large bypass this one), so it only
// has to hold a status line and headers at a time; small keeps the memory
// of every open stream small.
const bufSize = 4 << 10

// maxInlineBody is the largest request body copied behind the request
// head so both go out in one write; larger ones go out with writev.
const maxInlineBody = 64 << 10

// Options configures a Client. Zero fields take the defaults.
type Options struct {
	// Dial opens a connection; nil means a net.Dialer with DialTimeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds connecting (never the answer).
	DialTimeout time.Duration
	// IdleTimeout closes a connection idle this long; keep it below the
	// servers' own keep-alive so a request never goes into a connection
	// the server is closing.
	IdleTimeout time.Duration
	// MaxIdlePerHost is the most idle connections kept per address.
	MaxIdlePerHost int
	// UserAgent is sent with every request.
	UserAgent string
	// ResponseHeaderTimeout, when positive, bounds the wait for a
	// response's header after the request head was written; past it the
	// request fails with ErrResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
}

// ErrResponseHeaderTimeout is the error of a request whose response header
// did not arrive within Options.ResponseHeaderTimeout.
var ErrResponseHeaderTimeout = errors.New("timeout awaiting response headers")

// Request is one request. Target must be one Handles accepts.
type Request struct {
	// Method is the request method; empty means POST.
	Method string
	Target *url.URL
	// Header holds the headers sent. Host, User-Agent, Content-Length and
	// Transfer-Encoding are the client's own and skipped here.
	Header http.Header
	// Keys, when not nil, are the only keys of Header sent, in this order
	// (so a caller can forward part of a header without copying it).
	Keys []string
	// Body is sent with its length; Content-Length: 0 goes with an empty
	// POST, PUT or PATCH, as net/http sends it.
	Body []byte
	// BodyReader, when not nil, is sent instead of Body: exactly
	// ContentLength bytes of it, streamed. It may still be read after
	// RoundTrip returns, until it fails or ends: a caller whose reader
	// blocks (a client's body) must end it when it is no longer wanted.
	BodyReader    io.Reader
	ContentLength int64
}

// Client is a pool of connections; safe for concurrent use.
type Client struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	idleTimeout time.Duration
	maxIdle     int // per host
	userAgent   string
	headTimeout time.Duration

	mu       sync.Mutex
	idle     map[string][]*conn // by dial address, oldest first
	nIdle    int
	sweeping bool
	wake     chan struct{}
}

// New returns a client with opts' settings, defaults for zero fields.
func New(opts Options) *Client {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxIdlePerHost <= 0 {
		opts.MaxIdlePerHost = DefaultMaxIdlePerHost
	}
	if opts.UserAgent == "" {
		opts.UserAgent = DefaultUserAgent
	}
	if opts.Dial == nil {
		opts.Dial = (&net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	return &Client{
		dial:        opts.Dial,
		idleTimeout: opts.IdleTimeout,
		maxIdle:     opts.MaxIdlePerHost,
		userAgent:   opts.UserAgent,
		headTimeout: opts.ResponseHeaderTimeout,
		idle:        map[string][]*conn{},
		wake:        make(chan struct{}, 1),
	}
}

// conn is one pooled connection.
type conn struct {
	addr   string
	nc     net.Conn
	br     *bufio.Reader
	idleAt time.Time
	// peek checks liveness before reuse; set up on the first check.
	peek *peeker
}

// Handles reports whether the client can send to target; anything else
// (https, a host needing IDNA) is for a Transport.
func (c *Client) Handles(target *url.URL) bool {
	if target.Scheme != "http" || target.Host == "" {
		return false
	}
	for i := 0; i < len(target.Host); i++ {
		if b := target.Host[i]; b >= 0x80 || b <= ' ' {
			return false
		}
	}
	return true
}

// RoundTrip sends req and returns the response once its header has
// arrived. The response body must be read to its end or closed. Errors
// keep their cause: a refused dial is a *net.OpError wrapping
// syscall.ECONNREFUSED; the context's end is ctx.Err().
func (c *Client) RoundTrip(ctx context.Context, req *Request) (*http.Response, error) {
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	head, err := c.requestHead(method, req)
	if err != nil {
		return nil, err
	}
	defer putHead(head)
	headLen := len(*head)
	addr := DialAddr(req.Target.Host)
	for {
		pc, reused := c.get(addr)
		if pc == nil {
			nc, err := c.dial(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			pc = &conn{addr: addr, nc: nc, br: bufio.NewReaderSize(nc, bufSize)}
		}
		// Ends any read or write on the connection at once when the
		// request's context ends; stop reports whether it did.
		stop := context.AfterFunc(ctx, func() { _ = pc.nc.SetDeadline(aLongTimeAgo) })
		*head = (*head)[:headLen]
		var n int64
		var err error
		if req.BodyReader != nil {
			var hn int
			hn, err = pc.nc.Write(*head)
			n = int64(hn)
		} else {
			n, err = pc.write(head, req.Body)
		}
		if err != nil {
			stopped := stop()
			pc.nc.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if n == 0 && reused && stopped {
				// Not one byte went out: safe to send on another
				// connection.
				continue
			}
			return nil, fmt.Errorf("writing the request: %w", err)
		}
		var sent chan error
		if req.BodyReader != nil {
			sent = make(chan error, 1)
			go pc.sendBody(req.BodyReader, req.ContentLength, sent)
		}
		resp, err := c.readResponseHead(ctx, pc, method)
		if err != nil {
			stop()
			pc.nc.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			select {
			case berr := <-sent:
				// The body's own failure (the client's, mostly) is the
				// cause, as a Transport reports it.
				if berr != nil && !errors.Is(berr, errWriteFailed) {
					return nil, berr
				}
			default:
			}
			if reused && errors.Is(err, io.EOF) {
				return nil, errors.New("the server closed the kept-alive connection without answering")
			}
			return nil, fmt.Errorf("reading the response: %w", err)
		}
		b := &body{c: c, pc: pc, ctx: ctx, stop: stop, body: resp.Body, keep: !resp.Close, sent: sent}
		if resp.Body == http.NoBody {
			b.finish(true)
		} else {
			resp.Body = b
		}
		return resp, nil
	}
}

// aLongTimeAgo is a deadline that has passed: setting it fails pending
// I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// What http.ReadResponse needs to know of the request is its method (a
// HEAD answer has no body). Shared, read only.
var (
	postRequest = &http.Request{Method: http.MethodPost}
	getRequest  = &http.Request{Method: http.MethodGet}
)

func methodRequest(method string) *http.Request {
	switch method {
	case http.MethodPost:
		return postRequest
	case http.MethodGet:
		return getRequest
	}
	return &http.Request{Method: method}
}

// readResponseHead reads the response's header within the client's
// response-header timeout. The timeout expires the read deadline, which is
// lifted once the header is in unless the context ended meanwhile (its
// expiry must stand).
func (c *Client) readResponseHead(ctx context.Context, pc *conn, method string) (*http.Response, error) {
	if c.headTimeout <= 0 {
		return pc.readResponse(method)
	}
	_ = pc.nc.SetReadDeadline(time.Now().Add(c.headTimeout))
	resp, err := pc.readResponse(method)
	if err != nil {
		var ne net.Error
		if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
			return nil, ErrResponseHeaderTimeout
		}
		return nil, err
	}
	_ = pc.nc.SetReadDeadline(time.Time{})
	if ctx.Err() != nil {
		_ = pc.nc.SetDeadline(aLongTimeAgo)
	}
	return resp, nil
}

// errWriteFailed marks a streamed body that could not be written (the
// server went away), as against one that could not be read.
var errWriteFailed = errors.New("writing the request body failed")

// sendBody copies n bytes of r to the connection and reports how it went,
// before acting on a failure so RoundTrip can name the cause. A failed
// write closes the connection. A failed read only half-closes it: the
// server sees the body end short and answers or closes, which ends a
// response read waiting on a request that will never be whole, while an
// answer already arriving (the server answered early) stays readable.
func (pc *conn) sendBody(r io.Reader, n int64, sent chan<- error) {
	bp := copyBufs.Get().(*[]byte)
	err := copyN(pc.nc, r, n, *bp)
	copyBufs.Put(bp)
	sent <- err
	if err == nil {
		return
	}
	if cw, ok := pc.nc.(interface{ CloseWrite() error }); ok && !errors.Is(err, errWriteFailed) {
		_ = cw.CloseWrite()
		return
	}
	pc.nc.Close()
}

// copyBufs are sendBody's buffers: io.Copy into a TCP connection would
// allocate one per request.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyN copies exactly n bytes of r to w through buf; a write failure is
// marked errWriteFailed.
func copyN(w io.Writer, r io.Reader, n int64, buf []byte) error {
	for n > 0 {
		if int64(len(buf)) > n {
			buf = buf[:n]
		}
		nr, rerr := r.Read(buf)
		if nr > 0 {
			if _, werr := w.Write(buf[:nr]); werr != nil {
				return fmt.Errorf("%w: %w", errWriteFailed, werr)
			}
			n -= int64(nr)
		}
		switch {
		case n == 0:
			return nil
		case rerr == io.EOF:
			return io.ErrUnexpectedEOF
		case rerr != nil:
			return rerr
		}
	}
	return nil
}

// write sends the request head and body, in one write when the body is
// small enough to copy behind the head. It reports the bytes written.
func (pc *conn) write(head *[]byte, body []byte) (int64, error) {
	if len(body) <= maxInlineBody {
		*head = append(*head, body...)
		n, err := pc.nc.Write(*head)
		return int64(n), err
	}
	bufs := net.Buffers{*head, body}
	return bufs.WriteTo(pc.nc)
}

// readResponse reads the status line and header of the final response;
// interim 1xx responses (100 Continue, 103 Early Hints) are skipped as
// net/http skips them.
func (pc *conn) readResponse(method string) (*http.Response, error) {
	req := methodRequest(method)
	for range 5 {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("the server switched protocols unasked (101)")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			continue
		}
		return resp, nil
	}
	return nil, errors.New("too many interim (1xx) responses")
}

// body is a response body; its end returns the connection to the pool
// when the exchange left it clean, and closes it otherwise.
type body struct {
	c    *Client
	pc   *conn
	ctx  context.Context
	stop func() bool
	body io.ReadCloser
	keep bool
	done bool
	// sent reports a streamed body's end; nil for a buffered body.
	sent chan error
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.finish(true)
	case err != nil:
		b.finish(false)
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
	}
	return n, err
}

func (b *body) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *body) finish(clean bool) {
	b.done = true
	// stop is false once the deadline was expired: the connection is
	// spent whatever the body looked like. A streamed request body not
	// sent whole spends it too.
	reusable := b.stop() && clean && b.keep && b.pc.br.Buffered() == 0
	if b.sent != nil {
		select {
		case err := <-b.sent:
			reusable = reusable && err == nil
		default:
			if reusable {
				// The answer is whole but the body's goroutine has not
				// reported: most often it is returning from its last
				// write, which the server read before answering. A
				// moment is worth a kept connection; a body still
				// blocked after it (the server did not wait for it)
				// spends the connection.
				t := time.NewTimer(senderGrace)
				select {
				case err := <-b.sent:
					reusable = err == nil
				case <-t.C:
					reusable = false
				}
				t.Stop()
			}
		}
	}
	if reusable {
		b.c.put(b.pc)
		return
	}
	b.pc.nc.Close()
}

// senderGrace is how long a finished answer waits for its streamed body's
// goroutine to report.
const senderGrace = 5 * time.Millisecond
