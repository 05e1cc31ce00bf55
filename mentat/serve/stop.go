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
//     connection is refused, which it retries on another router), idle
//     connections close, and requests and streams in flight run on.
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

// shutdown is phases 2 and 3.
func (s *Server) shutdown(srv *http.Server) stopCounts {
	s.draining.Store(true) // also when the listener failed: not ready from here on
	s.log.Info("serve_shutting_down", "timeout", s.cfg.ShutdownTimeout, "requests", s.active.Load(), "idle_closed", s.conns.idle())
	s.endShuttingDown()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	err := srv.Shutdown(ctx)
	cancel()
	var n stopCounts
	if err == nil {
		return n
	}
	n.cut = s.active.Load()
	s.log.Warn("serve_cutting", "requests", n.cut, "after", s.cfg.ShutdownTimeout)
	s.cut(errCut)
	ctx, cancel = context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	if srv.Shutdown(ctx) != nil {
		n.forced = s.active.Load()
		_ = srv.Close()
	}
	return n
}

// conns tracks the listener's open connections and the net/http state of
// each (ConnState), so that the shutdown can say how many idle
// keep-alive connections it closes: each is one a client may be sending
// a request on at that moment. Behind a balancer whose own idle timeout
// is below SERVE_DRAIN_S there are none. Adding and removing a
// connection takes the lock; a state change is one atomic store.
type conns struct {
	mu  sync.Mutex
	set map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	owner *conns
	state atomic.Int32 // an http.ConnState
	once  sync.Once
}

// listener returns ln with every accepted connection tracked.
func (cs *conns) listener(ln net.Listener) net.Listener {
	return &trackingListener{Listener: ln, cs: cs}
}

// connState is the http.Server's ConnState hook.
func (cs *conns) connState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*trackedConn); ok {
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
