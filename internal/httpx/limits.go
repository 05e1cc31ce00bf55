package httpx

import (
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits are the edge limits of a public listener. Zero fields take the
// Default* values; the router reads them from SERVE_* variables, the
// gateway from its [gateway] section.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request head, from the first
	// byte of the request (net/http's ReadHeaderTimeout; for a
	// keep-alive connection the wait before the first byte is IdleTimeout).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request body, from the end of its
	// head (set with http.ResponseController.SetReadDeadline by the
	// handler that reads it; see BodyDeadline).
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new
	// request for this long.
	IdleTimeout time.Duration
	// WriteTimeout bounds writing an answer that is not a stream, from
	// when it starts (see WriteDeadline).
	WriteTimeout time.Duration
	// MaxHeaderBytes bounds a request head (net/http adds 4 KiB of
	// slack); over it the client gets 431.
	MaxHeaderBytes int
	// MaxConns caps open client connections; further clients wait in the
	// kernel's accept backlog until one closes. Negative means no cap.
	MaxConns int
}

// Defaults of Limits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 60 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 4096
)

// WithDefaults fills zero fields.
func (l Limits) WithDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.BodyTimeout, DefaultBodyTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// Server returns the http.Server of a listener with these limits. It sets
// no ReadTimeout or WriteTimeout, which would cut streams: every request
// starts with a write deadline WriteTimeout away (for the answers handlers
// make at once: refusals, status, metrics), and a handler that answers
// later or streams sets its own (WriteDeadline, StreamWriter,
// NoWriteDeadline, the proxy's SERVING_TIMEOUT_S). Bodies get BodyDeadline
// from the handler that reads them.
func (l Limits) Server(h http.Handler, errorLog *log.Logger) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           l.writeDeadlines(h),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// Listener caps ln at MaxConns open connections.
func (l Limits) Listener(ln net.Listener) net.Listener {
	return LimitListener(ln, l.WithDefaults().MaxConns)
}

// BodyDeadline sets the read deadline of w's connection to BodyTimeout
// from now; call it before reading a body, and LiftReadDeadline once it
// is read (an expiring read deadline would otherwise end the request's
// context while the answer is still being made).
func (l Limits) BodyDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(l.WithDefaults().BodyTimeout))
}

// LiftReadDeadline clears the read deadline of w's connection. Call it
// only once the body was read whole. After a failed read the body
// deadline must stay: net/http reads up to 256 KiB of an unread body
// before it closes the connection, and without a deadline a stalled
// client would hold it for ever (past the deadline the read fails at
// once).
func LiftReadDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// WriteDeadline sets the write deadline of w's connection to
// WriteTimeout from now: a client that stops reading an answer that is
// not a stream is cut then instead of holding the handler for ever.
func (l Limits) WriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(l.WithDefaults().WriteTimeout))
}

// writeDeadlines starts every request with a write deadline WriteTimeout
// away. It is set per request, not left from the last one: net/http
// keeps a connection's deadline across keep-alive requests.
func (l Limits) writeDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.WriteDeadline(w)
		h.ServeHTTP(w, r)
	})
}

// NoWriteDeadline wraps a handler whose answers may be streams of any
// length, bounded by the handler's own timeouts: it lifts the write
// deadline the request started with.
func NoWriteDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		h.ServeHTTP(w, r)
	})
}

// StreamWriter is w for a stream: each write must be taken by the client
// within WriteTimeout (the deadline moves with every write), so a client
// that stops reading a stream is cut, one that reads slowly is not.
func (l Limits) StreamWriter(w http.ResponseWriter) io.Writer {
	return &streamWriter{w: w, rc: http.NewResponseController(w), d: l.WithDefaults().WriteTimeout}
}

type streamWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (s *streamWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.d))
	return s.w.Write(p)
}

// LimitListener accepts at most n connections at once (n < 0: no limit);
// a further Accept waits until one of them is closed, so clients over the
// cap wait in the kernel's backlog instead of costing memory. Close
// unblocks a waiting Accept. It is golang.org/x/net/netutil's
// LimitListener, kept here to avoid a module for forty lines.
func LimitListener(l net.Listener, n int) net.Listener {
	if n < 0 {
		return l
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// CloseWrite half-closes the connection when it can: net/http does so
// before closing after an error answer (431, 400), so a client still
// sending reads the answer instead of a reset.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
