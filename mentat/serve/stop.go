package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The graceful stop, in three phases (Server.Run runs them when its
// context ends):
//
//  1. drain, SERVE_DRAIN_S: /readyz answers 503 at once and the router
//     goes on serving as before, every answer with Connection: close, so
//     a balancer takes the router out of its pool and its keep-alive
//     connections close after the request they carry. The router closes
//     no idle connection itself here: a balancer may be sending a
//     request on it at that moment, and such a request (a POST already
//     written) would not be retried elsewhere.
//  2. shutdown, SERVE_SHUTDOWN_S: the listener closes (a balancer's new
//     connection is refused, which it retries on another router), and
//     requests and streams in flight run on. The listener closes only
//     when the kernel's accept queue is empty (closeListener): closing it
//     resets every connection still queued, whose requests a balancer
//     has already sent and would not send again. An idle connection is
//     closed once it has been idle for SERVE_DRAIN_S, not at once: a
//     keep-alive answer whose head went out before the drain carries no
//     Connection: close, so its connection went back to the balancer's
//     pool when it ended, maybe a moment ago; a balancer whose
//     keepalive_timeout is below SERVE_DRAIN_S closes it first, and a
//     request it sends meanwhile is served (with Connection: close).
//  3. cut: past SERVE_SHUTDOWN_S, HardStop ends, and with it the context
//     of every request still running, so its handler can end it cleanly
//     (the proxy ends a stream with an error event and no [DONE]); cutGrace
//     later every connection left is closed.
//
// A process killed outright (SIGKILL) runs none of this: its connections
// are reset by the kernel, and nothing the router holds is shared with
// another process (the engines see their requests cancelled, the
// balancer sees failed connections).

// cutGrace is how long handlers have, once HardStop is done, to write
// their last words before their connections are closed.
const cutGrace = time.Second

// errCut is HardStop's cause.
var errCut = errors.New("the router is stopping and SERVE_SHUTDOWN_S has passed")

// HardStop is done when a stop's SERVE_SHUTDOWN_S has passed with
// requests still running. Every request's context derives from it (the
// listener's BaseContext), so a request's context ending while HardStop
// is done means the router cut it, not that its client left; a handler
// can then still answer (for cutGrace) before the connection closes.
func (s *Server) HardStop() context.Context { return s.hardStop }

// ShuttingDown is done once a stop has closed the listener (after the
// drain): a handler of a stream that never ends by itself (an MCP
// session's GET stream) should end it then rather than hold the stop for
// SERVE_SHUTDOWN_S.
func (s *Server) ShuttingDown() context.Context { return s.shuttingDown }

// SetStopReport adds f's key-value pairs to the serve_stopped log line
// (the proxy's count of what it cut); call it before Run.
func (s *Server) SetStopReport(f func() []any) { s.stopReport = f }

// Draining reports whether a stop has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

// serveHTTP is the listener's handler: the mux and its middleware, with
// requests counted for the stop's log lines, and with Connection: close
// on every answer once a stop has begun.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	if s.draining.Load() {
		w.Header().Set("Connection", "close")
	}
	s.front.ServeHTTP(w, r)
}

// drain is phase 1: readiness goes at once, and the router serves on for
// SERVE_DRAIN_S, or until the listener fails (then served is set and its
// error returned).
func (s *Server) drain(serveErr <-chan error) (served bool, err error) {
	s.draining.Store(true)
	s.log.Info("serve_draining", "drain", s.cfg.Drain, "requests", s.active.Load())
	t := time.NewTimer(s.cfg.Drain)
	defer t.Stop()
	select {
	case <-t.C:
		return false, nil
	case err = <-serveErr:
		return true, err
	}
}

// stopCounts is what the stop had to cut.
type stopCounts struct {
	// cut were running when SERVE_SHUTDOWN_S passed; forced were still
	// running cutGrace later, and their connections were closed.
	cut, forced int64
}

// shutdown is phases 2 and 3; ln is the listener srv serves.
func (s *Server) shutdown(srv *http.Server, ln net.Listener) stopCounts {
	s.draining.Store(true) // also when the listener failed: not ready from here on
	s.log.Info("serve_shutting_down", "timeout", s.cfg.ShutdownTimeout, "requests", s.active.Load(), "idle", s.conns.idle())
	s.endShuttingDown()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if queued := closeListener(ctx, s.ln, ln); queued > 0 {
		s.log.Warn("serve_listener_reset", "queued", queued, "after", s.cfg.ShutdownTimeout)
	}
	var n stopCounts
	if s.conns.settle(ctx, s.cfg.Drain) {
		_ = srv.Close()
		return n
	}
	n.cut = s.active.Load()
	s.log.Warn("serve_cutting", "requests", n.cut, "after", s.cfg.ShutdownTimeout)
	s.cut(errCut)
	gctx, gcancel := context.WithTimeout(context.Background(), cutGrace)
	defer gcancel()
	if !s.conns.settle(gctx, 0) {
		n.forced = s.active.Load()
	}
	_ = srv.Close()
	return n
}

// settleTick is how often settle looks at the connections.
const settleTick = 10 * time.Millisecond

// closeListener closes ln (which wraps raw) once raw's accept queue is
// empty, or when ctx ends; it returns how many connections were still
// queued then (and so reset). Where the queue cannot be read it closes at
// once.
func closeListener(ctx context.Context, raw, ln net.Listener) (queued int) {
	defer ln.Close()
	poll(ctx, time.Millisecond, func() bool {
		n, ok := acceptQueue(raw)
		queued = n
		return !ok || n == 0
	})
	return queued
}

// poll calls done every tick until it reports true, or ctx ends; it
// returns done's last answer.
func poll(ctx context.Context, tick time.Duration, done func() bool) bool {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if done() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// conns tracks the listener's open connections, the net/http state of
// each (ConnState) and since when it has been in it, so that the
// shutdown closes an idle connection only once it has been idle for
// SERVE_DRAIN_S (stop.go), which net/http's Shutdown cannot: it closes
// every idle connection at once. Adding and removing a connection takes
// the lock; a state change is two atomic stores.
type conns struct {
	mu  sync.Mutex
	set map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	owner *conns
	state atomic.Int32 // an http.ConnState
	since atomic.Int64 // unix nanoseconds: accepted, or last gone idle
	once  sync.Once
}

// listener returns ln with every accepted connection tracked.
func (cs *conns) listener(ln net.Listener) net.Listener {
	return &trackingListener{Listener: ln, cs: cs}
}

// connState is the http.Server's ConnState hook.
func (cs *conns) connState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*trackedConn); ok {
		if st == http.StateIdle {
			tc.since.Store(time.Now().UnixNano())
		}
		tc.state.Store(int32(st))
	}
}

// idle counts the connections net/http holds idle between requests.
func (cs *conns) idle() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for c := range cs.set {
		if http.ConnState(c.state.Load()) == http.StateIdle {
			n++
		}
	}
	return n
}

// settle closes each connection once it has been idle (or open with no
// request yet) for minIdle, until none is left but hijacked ones, and
// reports whether that happened before ctx ended.
func (cs *conns) settle(ctx context.Context, minIdle time.Duration) bool {
	return poll(ctx, settleTick, func() bool { return cs.closeIdle(time.Now().Add(-minIdle)) == 0 })
}

// closeIdle closes the connections idle or new since before cutoff and
// returns how many others are open (hijacked ones are not counted:
// net/http no longer serves them).
func (cs *conns) closeIdle(cutoff time.Time) (open int) {
	var done []*trackedConn
	cs.mu.Lock()
	for c := range cs.set {
		switch http.ConnState(c.state.Load()) {
		case http.StateHijacked:
			continue
		case http.StateIdle, http.StateNew:
			if c.since.Load() <= cutoff.UnixNano() {
				done = append(done, c)
				continue
			}
		}
		open++
	}
	cs.mu.Unlock()
	for _, c := range done {
		c.Close()
	}
	return open
}

type trackingListener struct {
	net.Listener
	cs *conns
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, owner: l.cs}
	tc.since.Store(time.Now().UnixNano())
	l.cs.mu.Lock()
	if l.cs.set == nil {
		l.cs.set = map[*trackedConn]struct{}{}
	}
	l.cs.set[tc] = struct{}{}
	l.cs.mu.Unlock()
	return tc, nil
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.set, c)
		c.owner.mu.Unlock()
	})
	return err
}

// CloseWrite half-closes when the connection under it can, as net/http
// does before closing after an error answer.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
