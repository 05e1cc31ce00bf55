package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// upstreamBufSize is a pooled connection's read buffer. Bodies are read
// through the relay's own buffer (reads that large bypass this one), so it
// only has to hold a status line and headers at a time; small keeps the
// memory of every open stream small.
const upstreamBufSize = 4 << 10

// maxInlineBody is the largest request body copied behind the request
// head so both go out in one write; larger ones go out with writev.
const maxInlineBody = 64 << 10

// h1Client sends requests to plain-HTTP engines over pooled HTTP/1.1
// keep-alive connections, entirely in the calling goroutine.
//
// net/http's Transport runs two goroutines per connection and hands every
// request and response between them and the caller over channels; for the
// small requests an engine mostly answers, that machinery cost about as
// much CPU as the rest of the proxy. Here one request is one write and
// the reads of its answer, nothing else. The rules the Transport kept
// still hold:
//
//   - Sent once: a request is re-sent (on another connection) only when
//     not one byte of it was written. Before reuse, a pooled connection is
//     checked for a close or stray bytes from the engine, so a connection
//     the engine dropped while idle is never written to.
//   - Idle connections are closed after idleTimeout, below the engines'
//     5 s keep-alive, by one sweeper goroutine that runs only while the
//     pool holds connections.
//   - No timeout but the request context's: its end (SERVING_TIMEOUT_S or
//     the client hanging up) expires the connection's deadlines, which
//     ends any read or write at once, and the connection is closed.
type h1Client struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	idleTimeout time.Duration
	maxIdle     int // per host

	mu       sync.Mutex
	idle     map[string][]*h1Conn // by dial address, oldest first
	nIdle    int
	sweeping bool
	wake     chan struct{}
}

func newH1Client() *h1Client {
	return &h1Client{
		dial:        (&net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		idleTimeout: IdleConnTimeout,
		maxIdle:     MaxIdleConnsPerHost,
		idle:        map[string][]*h1Conn{},
		wake:        make(chan struct{}, 1),
	}
}

// h1Conn is one upstream connection.
type h1Conn struct {
	addr   string
	nc     net.Conn
	br     *bufio.Reader
	idleAt time.Time
}

// handles reports whether the client can send to target itself; anything
// else (https, a host needing IDNA) goes through the Transport.
func (c *h1Client) handles(target *url.URL) bool {
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

// roundTrip sends a POST of body to target with the headers an engine gets
// from in, and returns the response once its header has arrived. The
// response body must be read to its end or closed.
func (c *h1Client) roundTrip(ctx context.Context, target *url.URL, in http.Header, body []byte) (*http.Response, error) {
	head, err := requestHead(target, in, len(body))
	if err != nil {
		return nil, err
	}
	defer putHead(head)
	headLen := len(*head)
	addr := dialAddr(target.Host)
	for {
		pc, reused := c.get(addr)
		if pc == nil {
			nc, err := c.dial(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			pc = &h1Conn{addr: addr, nc: nc, br: bufio.NewReaderSize(nc, upstreamBufSize)}
		}
		// Ends any read or write on the connection at once when the
		// request's context ends; stop reports whether it did.
		stop := context.AfterFunc(ctx, func() { _ = pc.nc.SetDeadline(aLongTimeAgo) })
		*head = (*head)[:headLen]
		n, err := pc.write(head, body)
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
		resp, err := pc.readResponse()
		if err != nil {
			stop()
			pc.nc.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if reused && errors.Is(err, io.EOF) {
				return nil, errors.New("the engine closed the kept-alive connection without answering")
			}
			return nil, fmt.Errorf("reading the response: %w", err)
		}
		b := &h1Body{c: c, pc: pc, ctx: ctx, stop: stop, body: resp.Body, keep: !resp.Close}
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

// postRequest is what http.ReadResponse needs to know of the request:
// its method. Shared, read only.
var postRequest = &http.Request{Method: http.MethodPost}

// write sends the request head and body, in one write when the body is
// small enough to copy behind the head. It reports the bytes written.
func (pc *h1Conn) write(head *[]byte, body []byte) (int64, error) {
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
func (pc *h1Conn) readResponse() (*http.Response, error) {
	for range 5 {
		resp, err := http.ReadResponse(pc.br, postRequest)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("the engine switched protocols unasked (101)")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			continue
		}
		return resp, nil
	}
	return nil, errors.New("too many interim (1xx) responses")
}

// h1Body is a response body; its end returns the connection to the pool
// when the exchange left it clean, and closes it otherwise.
type h1Body struct {
	c    *h1Client
	pc   *h1Conn
	ctx  context.Context
	stop func() bool
	body io.ReadCloser
	keep bool
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
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

func (b *h1Body) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *h1Body) finish(clean bool) {
	b.done = true
	// stop is false once the deadline was expired: the connection is
	// spent whatever the body looked like.
	if b.stop() && clean && b.keep && b.pc.br.Buffered() == 0 {
		b.c.put(b.pc)
		return
	}
	b.pc.nc.Close()
}

// get takes the most recently used idle connection to addr that is still
// usable, or returns nil.
func (c *h1Client) get(addr string) (*h1Conn, bool) {
	for {
		c.mu.Lock()
		list := c.idle[addr]
		if len(list) == 0 {
			c.mu.Unlock()
			return nil, false
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		c.idle[addr] = list[:len(list)-1]
		c.nIdle--
		c.mu.Unlock()
		if time.Since(pc.idleAt) < c.idleTimeout && pc.br.Buffered() == 0 && connAlive(pc.nc) {
			return pc, true
		}
		pc.nc.Close()
	}
}

func (c *h1Client) put(pc *h1Conn) {
	pc.idleAt = time.Now()
	c.mu.Lock()
	list := c.idle[pc.addr]
	if len(list) >= c.maxIdle {
		c.mu.Unlock()
		pc.nc.Close()
		return
	}
	c.idle[pc.addr] = append(list, pc)
	c.nIdle++
	start := !c.sweeping
	c.sweeping = true
	c.mu.Unlock()
	if start {
		go c.sweep()
	}
}

// sweep closes connections idle for idleTimeout. It runs while the pool
// holds any, and returns once it is empty.
func (c *h1Client) sweep() {
	t := time.NewTimer(c.idleTimeout)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.wake:
		}
		now := time.Now()
		var expired []*h1Conn
		next := c.idleTimeout
		c.mu.Lock()
		for addr, list := range c.idle {
			i := 0
			for i < len(list) && now.Sub(list[i].idleAt) >= c.idleTimeout {
				i++
			}
			expired = append(expired, list[:i]...)
			n := copy(list, list[i:])
			clear(list[n:])
			list = list[:n]
			c.nIdle -= i
			if n == 0 {
				delete(c.idle, addr)
				continue
			}
			c.idle[addr] = list
			next = min(next, c.idleTimeout-now.Sub(list[0].idleAt))
		}
		done := c.nIdle == 0
		if done {
			c.sweeping = false
		}
		c.mu.Unlock()
		for _, pc := range expired {
			pc.nc.Close()
		}
		if done {
			return
		}
		t.Reset(max(next, time.Millisecond))
	}
}

// closeIdle closes every idle connection; the sweeper, if running, sees
// the empty pool and returns.
func (c *h1Client) closeIdle() {
	c.mu.Lock()
	var all []*h1Conn
	for _, list := range c.idle {
		all = append(all, list...)
	}
	clear(c.idle)
	c.nIdle = 0
	c.mu.Unlock()
	for _, pc := range all {
		pc.nc.Close()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dialAddr is host:port for a URL host, port 80 when none is given.
func dialAddr(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && i > strings.LastIndexByte(host, ']') {
		if i == len(host)-1 {
			return host + "80"
		}
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}

var heads = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func putHead(b *[]byte) {
	if cap(*b) <= 2*maxInlineBody {
		*b = (*b)[:0]
		heads.Put(b)
	}
}

// requestHead writes the request line and header an engine gets: the
// forwarded headers of the client's request, a fixed User-Agent and the
// body's length. Values with line breaks are refused, as net/http does.
func requestHead(target *url.URL, in http.Header, n int) (*[]byte, error) {
	bp := heads.Get().(*[]byte)
	b := append((*bp)[:0], "POST "...)
	b = append(b, target.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, hostHeader(target.Host)...)
	b = append(b, "\r\nUser-Agent: "...)
	b = append(b, userAgent[0]...)
	b = append(b, "\r\n"...)
	for _, k := range forwarded {
		for _, v := range in[k] {
			if !validHeaderValue(v) {
				*bp = b
				putHead(bp)
				return nil, fmt.Errorf("invalid value for request header %s (control character)", k)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, strings.Trim(v, " \t")...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "\r\n\r\n"...)
	*bp = b
	return bp, nil
}

// hostHeader is the Host header for a URL host as net/http writes it: no
// empty port, no IPv6 zone.
func hostHeader(host string) string {
	host = strings.TrimSuffix(host, ":")
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, '%'); i >= 0 {
			if j := strings.IndexByte(host[i:], ']'); j >= 0 {
				return host[:i] + host[i+j:]
			}
		}
	}
	return host
}

// validHeaderValue is net/http's rule for a value it will send: no
// control characters but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}
