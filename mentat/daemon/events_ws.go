package daemon

import (
	"context"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// writeTimeout bounds one frame write; a client that cannot take a frame in
// this long is as good as gone.
const writeTimeout = 10 * time.Second

// serveEvents is GET /events: the snapshot frame, then one frame per event,
// a ping after PingIdle of silence. A client whose queue fills up is closed
// with "too slow" instead of holding the daemon back.
func (d *Daemon) serveEvents(w http.ResponseWriter, r *http.Request) {
	d.streams.Add(1)
	defer d.streams.Done()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer c.CloseNow()
	// CloseRead answers pings and close frames; its context ends with the
	// connection.
	ctx := c.CloseRead(r.Context())
	first, sub := d.reg.subscribe()
	defer d.reg.hub.unsubscribe(sub)

	write := func(frame []byte) error {
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		defer cancel()
		return c.Write(wctx, websocket.MessageText, frame)
	}
	if write(first) != nil {
		return
	}
	idle := time.NewTimer(d.cfg.PingIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.stopping:
			c.Close(websocket.StatusGoingAway, "daemon stopping")
			return
		case frame := <-sub.C:
			if write(frame) != nil {
				return
			}
			idle.Reset(d.cfg.PingIdle)
		case <-sub.Done:
			d.log.Warn("events_client_dropped", "remote", r.RemoteAddr, "reason", "queue full")
			c.Close(websocket.StatusPolicyViolation, "consumer too slow; reconnect and re-read /status")
			return
		case <-idle.C:
			pctx, cancel := context.WithTimeout(ctx, writeTimeout)
			err := c.Ping(pctx)
			cancel()
			if err != nil {
				return
			}
			idle.Reset(d.cfg.PingIdle)
		}
	}
}
