package proxy

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
)

// The router's hard stop (Config.Stop): a request still running when a
// stop's SERVE_SHUTDOWN_S has passed has its context ended by the server,
// and fail ends it as cleanly as its state allows (cutAtStop):
//
//   - an answer not begun gets 503 server_shutting_down, with
//     Connection: close;
//   - an event stream whose last write ended a frame (and any stream that
//     only carried keep-alive comments so far) gets one error event,
//     data: {"error":{…}}, and ends without data: [DONE], so that a client
//     knows it was cut: the OpenAI clients raise it as an error;
//   - a stream whose [DONE] has already gone out was complete and ends as
//     it is;
//   - anything else that has begun (an answer sent in bulk, a stream cut
//     inside a frame) has its connection cut, as any failure after the
//     head is.

// StopCounts are what the proxy ended at a hard stop.
type StopCounts struct {
	// Streams got an error event and no [DONE]; Refused got a 503 before
	// their answer began; Aborted had their connection cut mid-answer.
	Streams, Refused, Aborted int64
}

type stopCounters struct{ streams, refused, aborted atomic.Int64 }

// Stopped counts what the hard stop ended so far.
func (p *Proxy) Stopped() StopCounts {
	return StopCounts{Streams: p.stopped.streams.Load(), Refused: p.stopped.refused.Load(), Aborted: p.stopped.aborted.Load()}
}

// cutAtStop reports whether r's context ended because of the hard stop
// (which ends every request's context, see Config.Stop), and not because
// its client left.
func (p *Proxy) cutAtStop(r *http.Request) bool {
	return p.cfg.Stop != nil && p.cfg.Stop.Err() != nil && r.Context().Err() != nil
}

// errStopping is a request's answer at the hard stop.
func errStopping() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: "server_shutting_down",
		Message: "the router stopped before this request finished (its SERVE_SHUTDOWN_S passed) and cancelled it at the engine; send it again: a router that is running will take it"}
}

// failAtStop ends a request cut by the hard stop (see the top of this
// file). Like fail, it is the one place such a request is answered.
func (p *Proxy) failAtStop(w http.ResponseWriter, r *http.Request, x *exchange) {
	committed := x.ka.stop()
	if x.headersOut && x.tail.on && x.tail.done() {
		return // the stream was complete; only its end of body was missed
	}
	e := errStopping()
	p.logFailure(x, r.URL.Path, e)
	switch {
	case x.headersOut && (!x.tail.on || !x.tail.boundary()):
		p.stopped.aborted.Add(1)
		panic(http.ErrAbortHandler)
	case x.headersOut || committed:
		p.stopped.streams.Add(1)
		p.cfg.Edge.WriteDeadline(w)
		writeErrorEvent(w, e)
	default:
		p.stopped.refused.Add(1)
		w.Header().Set("Connection", "close")
		p.cfg.Edge.WriteDeadline(w)
		WriteError(w, e)
	}
}

// sseTail is an event stream's writer to its client that remembers the
// last bytes written: whether they end a frame (a blank line), so that an
// error event may follow without joining a frame cut in two, and whether
// that frame was data: [DONE].
type sseTail struct {
	on  bool // the answer is an event stream relayed through Write
	w   io.Writer
	end [16]byte
	n   int // bytes of end in use
}

func (t *sseTail) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.note(p[:n])
	return n, err
}

// note keeps the last len(end) bytes of what was written.
func (t *sseTail) note(p []byte) {
	if len(p) >= len(t.end) {
		t.n = copy(t.end[:], p[len(p)-len(t.end):])
		return
	}
	keep := min(t.n, len(t.end)-len(p))
	copy(t.end[:keep], t.end[t.n-keep:t.n])
	t.n = keep + copy(t.end[keep:], p)
}

// boundary reports whether nothing was written yet or the last write
// ended a frame.
func (t *sseTail) boundary() bool {
	b := t.end[:t.n]
	return len(b) == 0 || bytes.HasSuffix(b, []byte("\n\n")) || bytes.HasSuffix(b, []byte("\r\n\r\n")) || bytes.HasSuffix(b, []byte("\r\r"))
}

// done reports whether the last frame written was data: [DONE].
func (t *sseTail) done() bool {
	if !t.boundary() {
		return false
	}
	b := bytes.TrimRight(t.end[:t.n], "\r\n")
	return bytes.HasSuffix(b, []byte("data: [DONE]")) || bytes.HasSuffix(b, []byte("data:[DONE]"))
}
