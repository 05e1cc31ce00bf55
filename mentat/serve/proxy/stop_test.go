package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// writesThenWaits is an engine that answers with ctype, writes body,
// flushes, and then holds the answer open until the request ends (a
// generation still running).
func writesThenWaits(ctype, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, body)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

// hangs is an engine that never answers.
func hangs(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

const stopEvent = "data: {\"error\":{\"message\":\"the router stopped before this request finished (its SERVE_SHUTDOWN_S passed) and cancelled it at the engine; send it again: a router that is running will take it\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_shutting_down\"}}\n\n"

// At the router's hard stop every request still running ends as cleanly
// as its state allows: a stream at a frame boundary with an error event
// and no [DONE], a complete stream as it is, an answer not begun with 503
// and Connection: close, and anything cut inside a frame or a bulk answer
// with a cut connection.
func TestHardStop(t *testing.T) {
	for _, c := range []struct {
		name      string
		engine    http.HandlerFunc
		stream    bool
		keepAlive time.Duration
		before    string // what the client reads before the stop
		code      int
		after     string // what the body ends with ("": cut, the read fails)
		counts    StopCounts
	}{
		{"stream between frames", writesThenWaits("text/event-stream", "data: {\"a\":1}\n\n"), true, 0,
			"data: {\"a\":1}\n\n", 200, "data: {\"a\":1}\n\n" + stopEvent, StopCounts{Streams: 1}},
		{"stream after its [DONE]", writesThenWaits("text/event-stream", "data: {\"a\":1}\n\ndata: [DONE]\n\n"), true, 0,
			"data: {\"a\":1}\n\ndata: [DONE]\n\n", 200, "data: {\"a\":1}\n\ndata: [DONE]\n\n", StopCounts{}},
		{"stream inside a frame", writesThenWaits("text/event-stream", "data: {\"a\""), true, 0,
			"data: {\"a\"", 200, "", StopCounts{Aborted: 1}},
		{"stream with comments only", hangs, true, 30 * time.Millisecond,
			": keep-alive\n\n", 200, stopEvent, StopCounts{Streams: 1}},
		{"bulk answer begun", writesThenWaits("application/json", `{"id":`), false, 0,
			`{"id":`, 200, "", StopCounts{Aborted: 1}},
		{"answer not begun", hangs, false, 0, "", 503, `"code":"server_shutting_down"}}` + "\n", StopCounts{Refused: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := newEngine(t, c.engine)
			stop, cut := context.WithCancelCause(context.Background())
			defer cut(nil)
			rt := newRouterWith(t, Config{Stop: stop, KeepAlive: c.keepAlive}, func(srv *http.Server) {
				srv.BaseContext = func(net.Listener) context.Context { return stop }
			})
			rt.publish(t, map[string]string{"m": eng.base()}, nil)
			if c.before == "" {
				// Nothing comes before the stop: cut once the engine has
				// the request.
				go func() {
					for eng.requests.Load() == 0 {
						time.Sleep(5 * time.Millisecond)
					}
					cut(errors.New("stop"))
				}()
			}
			resp := rt.post(t, "/v1/chat/completions", jsonCT, fmt.Sprintf(`{"model":"m","stream":%v}`, c.stream))
			defer resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.code)
			}
			got := make([]byte, len(c.before))
			if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != c.before {
				t.Fatalf("before the stop: %q %v, want %q", got, err, c.before)
			}
			cut(errors.New("stop"))
			rest, err := io.ReadAll(resp.Body)
			body := c.before + string(rest)
			switch {
			case c.after == "" && err == nil:
				t.Errorf("the answer ended cleanly (%q); want its connection cut", body)
			case c.after != "" && err != nil:
				t.Errorf("reading the answer: %v (%q)", err, body)
			case c.after != "" && !strings.HasSuffix(body, c.after):
				t.Errorf("body %q, want it to end with %q", body, c.after)
			}
			if c.after == stopEvent && strings.Contains(body, "[DONE]") {
				t.Errorf("a cut stream has a [DONE]: %q", body)
			}
			if c.code == 503 && !resp.Close {
				t.Error("a 503 at the stop did not close its connection")
			}
			if got := rt.p.Stopped(); got != c.counts {
				t.Errorf("counted %+v, want %+v", got, c.counts)
			}
			eventually(t, "the engine's request to be cancelled", func() bool { return eng.closed.Load() > 0 })
		})
	}
}

// A client that leaves is still a client that left while no stop is
// under way: Config.Stop changes nothing then.
func TestHardStopNotCalled(t *testing.T) {
	eng := newEngine(t, writesThenWaits("text/event-stream", "data: {\"a\":1}\n\n"))
	stop, cut := context.WithCancelCause(context.Background())
	defer cut(nil)
	rt := newRouterWith(t, Config{Stop: stop}, func(srv *http.Server) {
		srv.BaseContext = func(net.Listener) context.Context { return stop }
	})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	buf := make([]byte, 8)
	io.ReadFull(resp.Body, buf)
	resp.Body.Close()
	eventually(t, "the engine's request to be cancelled", func() bool { return eng.closed.Load() > 0 })
	if got := rt.p.Stopped(); got != (StopCounts{}) {
		t.Errorf("counted %+v at no stop", got)
	}
}

// sseTail keeps the last bytes of what passed, whatever the write sizes.
func TestSSETail(t *testing.T) {
	for _, c := range []struct {
		writes         []string
		boundary, done bool
	}{
		{nil, true, false},
		{[]string{"data: {}\n\n"}, true, false},
		{[]string{"data: {", "}\n", "\n"}, true, false},
		{[]string{"data: {}\n"}, false, false},
		{[]string{"data: {}\r\n\r\n"}, true, false},
		{[]string{"data: [DONE]\n\n"}, true, true},
		{[]string{strings.Repeat("x", 40) + "\n\ndata: [DO", "NE]", "\n", "\n"}, true, true},
		{[]string{"data: [DONE]\n\n", "data: {}\n\n"}, true, false},
		{[]string{"data: [DONE]"}, false, false},
		{[]string{"data:[DONE]\r\n\r\n"}, true, true},
	} {
		var sink strings.Builder
		tl := sseTail{on: true, w: &sink}
		for _, w := range c.writes {
			tl.Write([]byte(w))
		}
		if tl.boundary() != c.boundary || tl.done() != c.done {
			t.Errorf("%q: boundary %v done %v, want %v %v", c.writes, tl.boundary(), tl.done(), c.boundary, c.done)
		}
		if sink.String() != strings.Join(c.writes, "") {
			t.Errorf("%q: passed %q", c.writes, sink.String())
		}
	}
}

// Before the router's first round is over (Config.Ready), a request for
// a model that does not route waits for the round, then goes as the
// snapshot says; after it, a refusal is at once.
func TestFirstRoundWait(t *testing.T) {
	eng := newEngine(t, delayed(0, 200, false))
	ready := make(chan struct{})
	rt := newRouter(t, Config{Ready: ready})
	rt.publish(t, nil, nil)
	start := time.Now()
	go func() {
		time.Sleep(300 * time.Millisecond)
		rt.publish(t, map[string]string{"m": eng.base()}, nil)
		close(ready)
	}()
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m"}`)
	resp.Body.Close()
	if resp.StatusCode != 200 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("a request before the first round: %d after %v, want 200 once the round is over", resp.StatusCode, time.Since(start))
	}
	start = time.Now()
	resp = rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"other"}`)
	resp.Body.Close()
	if resp.StatusCode != 404 || time.Since(start) > time.Second {
		t.Fatalf("after the first round, a model nothing serves: %d after %v, want 404 at once", resp.StatusCode, time.Since(start))
	}
}
