// Package h1server serves the hot requests of an HTTP/1.1 listener on the
// connection's own goroutine, with no per-request allocation of its own,
// and hands every other connection to a net/http server.
//
// A proxy's small requests are dominated by what net/http does around
// them: a Request with its header map and context, a background read per
// request to notice a hang-up, deadline changes, a response writer with
// its own header map. Here the handler sees the raw head, reads the body
// from the connection's buffer and writes its answer into the connection's
// write buffer, one write for a small answer.
//
// The fast path only takes the plain case (HTTP/1.1, origin-form target
// without escapes, Content-Length framing, one Host, no Expect or
// Upgrade) and only requests the Handler's Take accepts. At the first
// request it does not take, the connection goes to the Fallback server as
// if it had just been accepted, its unread bytes replayed: that request
// and all later ones on the connection get net/http's full behaviour,
// including every error net/http answers malformed requests with.
package h1server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Handler is the fast path.
type Handler interface {
	// Take reports whether the fast path serves the request with head h.
	// It must not keep h nor read the body.
	Take(h *Head) bool
	// Serve answers the request. x is valid until Serve returns; an
	// answer without a head becomes a 500, a chunked one is terminated,
	// and a panic closes the connection.
	Serve(x *Exchange)
}

// Server serves connections from one listener.
type Server struct {
	// Handler is the fast path; Fallback serves every connection at the
	// first request Handler does not take. Its ReadHeaderTimeout,
	// IdleTimeout (or ReadTimeout) and ErrorLog apply to the fast path
	// too; its Handler and ConnState see handed-over connections only.
	Handler  Handler
	Fallback *http.Server

	mu      sync.Mutex
	ln      net.Listener
	conns   map[*conn]struct{}
	handoff *handoffListener
	// fbDone is closed when the fallback's Serve returned: Shutdown and
	// Close (even repeated, or Close after Shutdown) wait on it.
	fbDone   chan struct{}
	shutdown atomic.Bool
}

// bufSize is a connection's read and write buffer: a request head larger
// than this goes to the fallback.
const bufSize = 4 << 10

// Serve accepts connections on ln until Shutdown or Close, and returns
// http.ErrServerClosed then, or the listener's error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutdown.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.conns = map[*conn]struct{}{}
	s.handoff = newHandoffListener(ln.Addr())
	s.fbDone = make(chan struct{})
	s.mu.Unlock()
	go func() {
		_ = s.Fallback.Serve(s.handoff)
		close(s.fbDone)
	}()

	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: back off as
				// net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, nc)
		if !s.track(c, true) {
			nc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

func (s *Server) shuttingDown() bool { return s.shutdown.Load() }

func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutdown.Load() {
			return false
		}
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	return true
}

// Shutdown stops accepting, closes idle connections, waits for running
// exchanges to end (their connections close after them), then shuts the
// fallback down the same way; ctx bounds the wait, after which the
// remaining connections are closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return s.Fallback.Shutdown(ctx)
	}
	ln.Close()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if s.closeIdle() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			s.closeAll()
			s.Fallback.Close()
			return ctx.Err()
		case <-t.C:
		}
	}
	err := s.Fallback.Shutdown(ctx)
	<-s.fbDone
	return err
}

// Close closes the listener and every connection at once.
func (s *Server) Close() error {
	s.shutdown.Store(true)
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return s.Fallback.Close()
	}
	err := ln.Close()
	s.closeAll()
	s.Fallback.Close()
	<-s.fbDone
	return err
}

// closeIdle closes connections waiting for a request and returns how
// many connections are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.nc.Close()
		}
	}
	return len(s.conns)
}

func (s *Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.state.Store(stateClosed)
		c.nc.Close()
	}
}

// Connection states: idle between requests (Shutdown may close it),
// active while a request is read and answered.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

type conn struct {
	srv   *Server
	nc    net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	state atomic.Int32
	watch watcher
	x     Exchange
	// headLen is the length of the head readHead found.
	headLen int
	// rdl is the read deadline set now (zero: none), to skip changes
	// that change nothing.
	rdl time.Time
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc}
	c.br = bufio.NewReaderSize(source{c}, bufSize)
	c.bw = bufio.NewWriterSize(nc, bufSize)
	c.watch.init(c)
	c.x.c = c
	return c
}

// source is the connection as the read buffer sees it: a byte the
// hang-up watch read comes first.
type source struct{ c *conn }

func (s source) Read(p []byte) (int, error) {
	w := &s.c.watch
	if len(p) > 0 && w.hasSaved.Load() {
		p[0] = w.saved[0]
		w.hasSaved.Store(false)
		return 1, nil
	}
	return s.c.nc.Read(p)
}

func (c *conn) setReadDeadline(t time.Time) error {
	if t.Equal(c.rdl) {
		return nil
	}
	c.rdl = t
	return c.nc.SetReadDeadline(t)
}

func (c *conn) serve() {
	handedOver := false
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			c.logf("h1server: panic serving %v: %v", c.nc.RemoteAddr(), p)
		}
		c.watch.disarm()
		c.srv.track(c, false)
		if !handedOver {
			c.nc.Close()
		}
	}()
	hs := c.srv.Fallback
	idle := hs.IdleTimeout
	if idle <= 0 {
		idle = hs.ReadTimeout
	}
	for first := true; ; first = false {
		if c.br.Buffered() == 0 && !c.watch.hasSaved.Load() {
			var dl time.Time
			if idle > 0 {
				dl = time.Now().Add(idle)
			}
			// As with net/http, a new connection's first head is due
			// within the header timeout, from the accept on.
			if d := hs.ReadHeaderTimeout; first && d > 0 {
				dl = time.Now().Add(d)
			}
			if c.setReadDeadline(dl) != nil {
				return
			}
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return
		}
		ok, err := c.readHead()
		if err != nil {
			return
		}
		if !ok || !c.srv.Handler.Take(&c.x.Head) {
			handedOver = c.handOver()
			return
		}
		_, _ = c.br.Discard(c.headLen)
		x := &c.x
		x.bodyLeft, x.bodyErr = x.Head.ContentLength, nil
		x.wroteHead, x.chunked, x.noBody, x.left, x.written, x.werr = false, false, false, 0, 0, nil
		x.close = x.Head.Close
		c.srv.Handler.Serve(x)
		c.watch.disarm()
		if !x.finish() || !c.state.CompareAndSwap(stateActive, stateIdle) || c.srv.shuttingDown() {
			return
		}
	}
}

// readHead reads a complete head into c.x.Head, leaving its bytes in the
// buffer (a handed-over connection replays them). ok is false when the
// request is not for the fast path (including a head too large for the
// buffer); err when the connection failed or the header deadline passed.
// The idle or header deadline ends with the head: neither bounds the
// body nor the exchange.
func (c *conn) readHead() (ok bool, err error) {
	timed := false
	defer func() {
		if err == nil {
			err = c.setReadDeadline(time.Time{})
		}
	}()
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if n := headEnd(buf); n >= 0 {
			c.headLen = n
			c.x.Head.Buffered = int64(len(buf) - n)
			return c.x.Head.parse(buf[:n]), nil
		}
		if len(buf) >= bufSize {
			return false, nil
		}
		if !timed {
			if d := c.srv.Fallback.ReadHeaderTimeout; d > 0 {
				timed = true
				if err := c.setReadDeadline(time.Now().Add(d)); err != nil {
					return false, err
				}
			}
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return false, nil
			}
			return false, err
		}
	}
}

// handOver gives the connection, its unread bytes first, to the
// fallback server.
func (c *conn) handOver() bool {
	if c.setReadDeadline(time.Time{}) != nil {
		return false
	}
	pending, _ := c.br.Peek(c.br.Buffered())
	rc := &replayConn{Conn: c.nc, pending: append([]byte(nil), pending...), src: source{c}}
	return c.srv.handoff.deliver(rc)
}

func (c *conn) logf(format string, args ...any) {
	if l := c.srv.Fallback.ErrorLog; l != nil {
		l.Printf(format, args...)
	}
}
