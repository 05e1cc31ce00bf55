package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Reconnect backoff for the /events WebSocket.
const (
	eventsBackoffMin = 250 * time.Millisecond
	eventsBackoffMax = 30 * time.Second
)

// watcher follows one daemon: it polls /status every poll interval and
// holds /events open; every event frame rings the doorbell, which triggers
// an immediate re-read. The doorbell has capacity one, so a burst of frames
// arriving while a read is in flight collapses into one more read.
type watcher struct {
	addr    string
	poll    time.Duration
	timeout time.Duration
	getter  *Getter
	log     *slog.Logger
	// report receives each poll's outcome; events reports the WebSocket
	// state. Both are called from the watcher's goroutines.
	report func(addr string, snap *wire.Snapshot, err error)
	events func(addr string, open bool)

	bell chan struct{}
}

func (w *watcher) ring() {
	select {
	case w.bell <- struct{}{}:
	default:
	}
}

// run blocks until ctx ends and both loops have returned.
func (w *watcher) run(ctx context.Context) {
	w.bell = make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { w.eventsLoop(ctx) })
	w.pollLoop(ctx)
	wg.Wait()
}

func (w *watcher) pollLoop(ctx context.Context) {
	t := time.NewTicker(w.poll)
	defer t.Stop()
	for {
		w.readStatus(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.bell:
		}
	}
}

func (w *watcher) readStatus(ctx context.Context) {
	defer recoverLog(w.log, "status_poll_panic", "daemon", w.addr)
	res, err := w.getter.Get(ctx, "http://"+w.addr+"/status", w.timeout, wire.MaxSnapshotBytes)
	if ctx.Err() != nil {
		return // our own cancellation is not the daemon's failure
	}
	if err != nil {
		w.report(w.addr, nil, statusError(err))
		return
	}
	snap, err := wire.DecodeSnapshot(res.Body)
	if err != nil {
		w.report(w.addr, nil, fmt.Errorf("GET /status: %v: %s", err, notADaemon))
		return
	}
	w.report(w.addr, snap, nil)
}

func (w *watcher) eventsLoop(ctx context.Context) {
	backoff := eventsBackoffMin
	for ctx.Err() == nil {
		start := time.Now()
		err := w.followEvents(ctx)
		if ctx.Err() != nil {
			return
		}
		w.events(w.addr, false)
		w.log.Debug("daemon_events_closed", "daemon", w.addr, "err", err)
		if time.Since(start) > eventsBackoffMax {
			backoff = eventsBackoffMin // it was up for a while: this is a fresh failure
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, eventsBackoffMax)
	}
}

// followEvents holds one /events connection until it fails or ctx ends.
func (w *watcher) followEvents(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("daemon_events_panic", "daemon", w.addr, "panic", p, "stack", string(debug.Stack()))
			err = errors.New("panic")
		}
	}()
	dctx, cancel := context.WithTimeout(ctx, w.timeout)
	c, _, err := websocket.Dial(dctx, "ws://"+w.addr+"/events", &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}},
	})
	cancel()
	if err != nil {
		return err
	}
	defer c.CloseNow()
	// The first frame is a whole snapshot.
	c.SetReadLimit(wire.MaxSnapshotBytes + 1024)
	w.events(w.addr, true)
	for {
		_, r, err := c.Reader(ctx)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return err
		}
		// Every frame is a doorbell; the re-read is the truth.
		w.ring()
	}
}

func recoverLog(log *slog.Logger, event string, args ...any) {
	if p := recover(); p != nil {
		log.Error(event, append(args, "panic", p, "stack", string(debug.Stack()))...)
	}
}

const notADaemon = "the server there is not a mentatd daemon; is MENTAT_DAEMONS pointing at the daemon's HTTP port (MENTAT_HTTP_PORT, 6380 by default)?"

// statusError words a failed /status read for /status.json and the log:
// what failed, then what to check, since a first router usually meets
// this before anything else (no daemon started yet, or the wrong port).
func statusError(err error) error {
	var se *StatusError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("GET /status: %v: no mentatd daemon listens there; start one (mentatd daemon) or set MENTAT_DAEMONS to the daemons' HTTP addresses", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("GET /status: %v: the daemon's host does not answer; check the address in MENTAT_DAEMONS and that the router can reach its HTTP port", err)
	case errors.As(err, &se):
		return fmt.Errorf("GET /status: %v: %s", err, notADaemon)
	}
	return errors.New("GET /status: " + err.Error())
}
