package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// keepAlive sends SSE comment lines to a streamed request's client while
// the request waits (in flow control's queue, or for the engine's first
// byte) longer than SSE_KEEPALIVE_S, so that a balancer's idle timeout in
// between does not cut it. The first comment commits the answer: status
// 200 and an event-stream head go out with it, and from then on an error
// can only be told as an error event (fail writes one), never as a status.
//
// Every write to the client while a keepAlive runs goes through its mutex
// (the comments come from a timer's goroutine); once the engine's first
// byte has been written, it stops for good and writes pass through.
type keepAlive struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	interval time.Duration

	mu        sync.Mutex
	timer     *time.Timer
	committed bool // the 200 head went out (with a comment, or the engine's)
	done      bool // the first byte of the answer was written, or stopped
	// deadline is the stream's own write deadline, put back when the
	// comments stop (each comment sets a short one).
	deadline time.Time
}

// keepAliveComment is what a waiting stream gets every interval.
var keepAliveComment = []byte(": keep-alive\n\n")

func newKeepAlive(w http.ResponseWriter, interval time.Duration) *keepAlive {
	k := &keepAlive{w: w, rc: http.NewResponseController(w), interval: interval}
	k.mu.Lock() // a tick waits for its timer to be stored
	k.timer = time.AfterFunc(interval, k.tick)
	k.mu.Unlock()
	return k
}

func (k *keepAlive) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return
	}
	// A client that stopped reading must not hold this goroutine: each
	// comment has its interval (at least 10 s) to go out.
	_ = k.rc.SetWriteDeadline(time.Now().Add(max(k.interval, 10*time.Second)))
	if !k.committed {
		h := k.w.Header()
		h.Set("Content-Type", "text/event-stream")
		markStream(h)
		k.w.WriteHeader(http.StatusOK)
		k.committed = true
	}
	if _, err := k.w.Write(keepAliveComment); err != nil {
		k.done = true // the client is gone; the request finds out on its own
		return
	}
	_ = k.rc.Flush()
	k.timer.Reset(k.interval)
}

// hold stops the comments until release and reports whether the answer
// is committed: the proxy then writes its head (or not) without a comment
// in between.
func (k *keepAlive) hold() bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	return k.committed
}

// releaseStream ends a hold during which the proxy wrote the engine's
// event-stream head (or found it out already): the answer is committed,
// and the comments go on, between the head and the first byte, until the
// first byte (writer); deadline is the stream's write deadline.
func (k *keepAlive) releaseStream(deadline time.Time) {
	k.committed, k.deadline = true, deadline
	k.mu.Unlock()
}

// stop ends the comments for good and reports whether the answer was
// committed.
func (k *keepAlive) stop() bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.done {
		k.done = true
		k.timer.Stop()
		if !k.deadline.IsZero() {
			_ = k.rc.SetWriteDeadline(k.deadline)
		}
	}
	return k.committed
}

// writer wraps dst (the client, or the meter in front of it) so that the
// answer's bytes and the comments do not interleave inside a write: until
// the first byte is written, each write takes the mutex; the first one
// stops the comments.
func (k *keepAlive) writer(dst io.Writer) io.Writer {
	if k == nil {
		return dst
	}
	return &keepAliveWriter{k: k, dst: dst}
}

type keepAliveWriter struct {
	k     *keepAlive
	dst   io.Writer
	first bool
}

func (w *keepAliveWriter) Write(p []byte) (int, error) {
	if !w.first {
		w.first = true
		w.k.stop()
	}
	return w.dst.Write(p)
}

// writeErrorEvent tells a failure on a committed event stream: one data
// line holding OpenAI's error object (the official clients raise it as
// an APIError), and no [DONE].
func writeErrorEvent(w http.ResponseWriter, e *Error) {
	b := e.body()
	out := make([]byte, 0, len(b)+8)
	out = append(append(append(out, "data: "...), bytes.TrimRight(b, "\n")...), "\n\n"...)
	_, _ = w.Write(out)
	_ = http.NewResponseController(w).Flush()
}

// upstreamAfterCommit is the error for an engine's answer that is not a
// 200 event stream, on a stream that comments already committed: its
// status and the start of its body, or its own error object's message.
func upstreamAfterCommit(resp *http.Response) *Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &body) == nil && body.Error.Message != "" {
		msg = body.Error.Message
	}
	if resp.StatusCode == http.StatusOK {
		msg = "the engine answered 200 with " + resp.Header.Get("Content-Type") + ", not an event stream"
	}
	status := resp.StatusCode
	if status < 400 {
		status = http.StatusBadGateway
	}
	return &Error{Status: status, Code: "upstream_error", Message: fmt.Sprintf("the engine answered %d after the stream had begun: %s", resp.StatusCode, msg)}
}
