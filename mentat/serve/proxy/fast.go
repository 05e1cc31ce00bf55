package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/internal/h1client"
	"github.com/fe64bb06/frontdoor/internal/h1server"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// Fast returns the proxy as the fast path of an h1server.Server: the same
// routing, refusals, relay and accounting as ServeHTTP, on raw heads and
// the connection's own buffers. reserved are paths other handlers of the
// server own; requests to them, and every request the fast path does not
// take, reach the fallback server, whose handler should include
// ServeHTTP.
func (p *Proxy) Fast(reserved ...string) h1server.Handler {
	return &fast{p: p, reserved: reserved}
}

type fast struct {
	p        *Proxy
	reserved []string
}

// maxPooledBody is the largest request body buffer kept for reuse.
const maxPooledBody = 64 << 10

// fastState is one request's working memory, pooled.
type fastState struct {
	x    exchange
	call h1client.Call
	head []byte
	body []byte
	hdr  []byte
	gone atomic.Bool
	// deadline is SERVING_TIMEOUT_S from sending, set on the upstream
	// connection only when the exchange outlives a moment (Slow).
	deadline time.Time
}

var fastStates = sync.Pool{New: func() any { return &fastState{} }}

// Slow implements h1server.Watcher.
func (st *fastState) Slow() { st.call.SetDeadline(st.deadline) }

// Gone implements h1server.Watcher: the client hung up, the engine's
// request ends at once.
func (st *fastState) Gone() {
	st.gone.Store(true)
	st.call.Abort()
}

// Take accepts what ServeHTTP would answer the same way from raw fields:
// a POST to a clean path of plain characters that no other handler owns,
// with a body within the limit, not compressed, and single-valued
// Content-Type, Accept and Authorization. The rest (413 from
// Content-Length, 415, odd paths) is left to ServeHTTP.
func (f *fast) Take(h *h1server.Head) bool {
	if string(h.Method) != http.MethodPost || f.p.h1 == nil || h.ContentLength > f.p.cfg.MaxBody {
		return false
	}
	if !plainPath(h.Path) {
		return false
	}
	for _, r := range f.reserved {
		if string(h.Path) == r {
			return false
		}
	}
	if ce := h.Get("Content-Encoding"); ce != nil && !strings.EqualFold(string(ce), "identity") {
		return false
	}
	for _, k := range forwarded {
		if h.Count(k) > 1 {
			return false
		}
	}
	return h.Count("Content-Encoding") <= 1
}

// plainPath reports whether p is clean (as net/http's ServeMux keeps it:
// no empty, "." or ".." segments) and made only of characters a URL path
// carries unescaped, so it joins onto an engine's base byte for byte.
func plainPath(p []byte) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	for _, c := range p {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '/':
		case strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0:
		default:
			return false
		}
	}
	return h1server.CleanPath(p)
}

// Serve answers one request.
func (f *fast) Serve(hx *h1server.Exchange) {
	p := f.p
	st := fastStates.Get().(*fastState)
	st.gone.Store(false)
	x := &st.x
	*x = exchange{start: time.Now(), timeout: p.cfg.Timeout}
	defer func() {
		// Before st goes back to the pool: a watch ending later could
		// call st's Gone for another request.
		hx.Unwatch()
		p.record(x)
		if p.log.Enabled(context.Background(), slog.LevelDebug) {
			p.log.Debug("proxy_request", "model", x.model, "path", string(hx.Head.Path), "status", x.code, "elapsed", time.Since(x.start))
		}
		if cap(st.body) > maxPooledBody {
			st.body = nil
		}
		fastStates.Put(st)
	}()
	if err := f.serve(hx, st); err != nil {
		f.fail(hx, x, err)
	}
}

func (f *fast) serve(hx *h1server.Exchange, st *fastState) error {
	p, x, h := f.p, &st.x, &hx.Head
	bodyWasBuffered := hx.BodyBuffered()
	body, err := st.readBody(hx)
	if err != nil {
		return err
	}
	fl, err := extract(string(h.Get("Content-Type")), body)
	if err != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Param: "model", Message: err.Error()}
	}
	if err := p.route(x, fl.Model); err != nil {
		return err
	}
	if !p.h1.Handles(x.route.Base) {
		return f.viaTransport(hx, st, body, fl.Stream)
	}
	st.head = appendUpstreamHead(st.head[:0], x.route, h, len(body))
	x.head = st.head

	// The clock starts when the request goes upstream: a slow upload is
	// not generation time.
	sent := x.start
	if !bodyWasBuffered {
		sent = time.Now()
	}
	st.deadline = sent.Add(p.cfg.Timeout)
	x.flight = p.inflight.add(x.model, x.route.Group, int64(len(body)), fl.Stream, x.start)
	x.mm = p.m.model(x.model)
	x.mm.gauge().Inc()
	hx.Watch(st.deadline.Add(time.Second), st)

	call := &st.call
	defer call.Close()
	// First of the two: once the watch is over, nothing can abort the
	// Call after its Close (a reused Call would start aborted).
	defer hx.Unwatch()
	if err := p.h1.Send(call, h1client.DialAddr(x.route.Base.Host), st.head, body); err != nil {
		return st.upstreamFailed(err, st.deadline)
	}
	stream := isEventStream(string(call.Get("Content-Type")))
	var hasDate bool
	st.hdr, hasDate = appendClientHeader(st.hdr[:0], call.Header, stream)
	return st.relay(hx, call.Status, call.ContentLength, hasDate, stream, call, sent)
}

// readBody reads the declared body whole: into the pooled buffer when it
// fits.
func (st *fastState) readBody(hx *h1server.Exchange) ([]byte, error) {
	n := hx.Head.ContentLength
	if n == 0 {
		return nil, nil
	}
	if int64(cap(st.body)) >= n {
		st.body = st.body[:n]
	} else if n <= maxPooledBody {
		st.body = make([]byte, n, maxPooledBody)
	} else {
		// A declared length is a promise, not bytes: grow as they come.
		b, err := readAll(hx, min(n, 1<<20))
		if err == nil && int64(len(b)) != n {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, unreadable(err)
		}
		return b, nil
	}
	if _, err := io.ReadFull(hx, st.body); err != nil {
		return nil, unreadable(err)
	}
	return st.body, nil
}

func unreadable(err error) error {
	return &Error{Status: http.StatusBadRequest, Code: "unreadable_body",
		Message: fmt.Sprintf("could not read the request body: %v; send the whole body (Content-Length must match)", err), Cause: err}
}

// upstreamFailed classifies a failed Send or body read.
func (st *fastState) upstreamFailed(err error, deadline time.Time) error {
	if st.gone.Load() {
		return errClientGone
	}
	timedOut := errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(deadline)
	return upstreamError(err, timedOut, &st.x)
}

// relay sends the engine's answer on: the head (flushed at once for a
// stream or a body of unknown length), then the body through one pooled
// buffer, each chunk flushed as it arrives when flushing.
func (st *fastState) relay(hx *h1server.Exchange, status int, length int64, hasDate, stream bool, body io.Reader, sent time.Time) error {
	x := &st.x
	if stream {
		x.flight.stream.Store(true)
	}
	if err := hx.WriteHead(h1server.Response{Status: status, Header: st.hdr, ContentLength: length, HasDate: hasDate}); err != nil {
		return errClientGone
	}
	x.code, x.headersOut = status, true
	flush := stream || length < 0
	if flush {
		if err := hx.Flush(); err != nil {
			return errClientGone
		}
	}
	var flushFn func() error
	if flush {
		flushFn = hx.Flush
	}
	readErr, writeErr := x.relay(hx, flushFn, body, sent)
	switch {
	case writeErr != nil:
		if st.gone.Load() || !errors.Is(writeErr, os.ErrDeadlineExceeded) {
			return errClientGone
		}
		return &Error{Status: http.StatusGatewayTimeout, Code: "upstream_timeout",
			Message: "the client did not read the answer within SERVING_TIMEOUT_S"}
	case readErr != nil:
		return st.upstreamFailed(readErr, sent.Add(x.timeout))
	}
	return nil
}

// fail answers a failed request, or cuts the connection when the answer
// had begun.
func (f *fast) fail(hx *h1server.Exchange, x *exchange, err error) {
	if errors.Is(err, errClientGone) {
		x.code = StatusClientClosed
		hx.Abort()
		return
	}
	e := asError(err)
	f.p.logFailure(x, string(hx.Head.Path), e)
	if x.headersOut {
		hx.Abort()
		return
	}
	if e.Status == http.StatusBadRequest && e.Code == "unreadable_body" {
		hx.CloseAfter()
	}
	b := e.body()
	_ = hx.WriteHead(h1server.Response{Status: e.Status, ContentLength: int64(len(b)),
		Header: []byte("Content-Type: application/json\r\nCache-Control: no-store\r\n")})
	_, _ = hx.Write(b)
}

// appendUpstreamHead writes the engine's request head: the target
// resolved as Target resolves it, Host, the router's User-Agent, the
// forwarded fields and the body's length.
func appendUpstreamHead(b []byte, rt *routes.Route, h *h1server.Head, n int) []byte {
	base, rest := rt.Root, h.Path
	if string(rest) == "/v1" || strings.HasPrefix(string(rest), "/v1/") {
		base, rest = rt.Base, rest[len("/v1"):]
	}
	b = append(b, "POST "...)
	bp := strings.TrimRight(base.EscapedPath(), "/")
	b = append(b, bp...)
	b = append(b, rest...)
	if len(bp) == 0 && len(rest) == 0 {
		b = append(b, '/')
	}
	switch {
	case base.RawQuery == "":
		if len(h.Query) > 0 {
			b = append(b, '?')
			b = append(b, h.Query...)
		}
	default:
		b = append(b, '?')
		b = append(b, base.RawQuery...)
		if len(h.Query) > 0 {
			b = append(b, '&')
			b = append(b, h.Query...)
		}
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, h1client.HostHeader(rt.Base.Host)...)
	b = append(b, "\r\nUser-Agent: "...)
	b = append(b, userAgent[0]...)
	b = append(b, "\r\n"...)
	for _, k := range forwarded {
		if v := h.Get(k); v != nil {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n\r\n"...)
}

// upstreamURI is the request target of a head appendUpstreamHead wrote.
func upstreamURI(head []byte) string {
	if len(head) < len("POST ") {
		return ""
	}
	uri, _, _ := strings.Cut(string(head[len("POST "):]), " ")
	return uri
}

// appendClientHeader writes the engine's response fields the client gets:
// not hop-by-hop ones nor those the engine's Connection names, not its
// framing (the server writes its own), and for an event stream the
// anti-buffering fields in place of the engine's. It reports whether a
// Date field was kept.
func appendClientHeader(b, upstream []byte, stream bool) ([]byte, bool) {
	var named [][]byte
	for rest := upstream; len(rest) > 0; {
		name, value, next := nextField(rest)
		rest = next
		if bytes.EqualFold(name, []byte("Connection")) {
			for f := range bytes.SplitSeq(value, []byte(",")) {
				if f = bytes.TrimSpace(f); len(f) > 0 {
					named = append(named, f)
				}
			}
		}
	}
	hasDate := false
	for rest := upstream; len(rest) > 0; {
		line := rest
		name, _, next := nextField(rest)
		line, rest = line[:len(line)-len(next)], next
		if dropResponseField(name, named, stream) {
			continue
		}
		if bytes.EqualFold(name, []byte("Date")) {
			hasDate = true
		}
		b = append(b, line...)
	}
	if stream {
		b = append(b, "X-Accel-Buffering: no\r\nCache-Control: no-cache\r\n"...)
	}
	return b, hasDate
}

// nextField splits the first of raw CRLF-terminated field lines (as
// h1client checked them) into name and trimmed value.
func nextField(raw []byte) (name, value, rest []byte) {
	i := bytes.IndexByte(raw, '\n')
	line := raw[:i-1]
	name, value, _ = bytes.Cut(line, []byte(":"))
	return name, bytes.TrimSpace(value), raw[i+1:]
}

func dropResponseField(name []byte, named [][]byte, stream bool) bool {
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		return true
	case stream && (bytes.EqualFold(name, []byte("X-Accel-Buffering")) || bytes.EqualFold(name, []byte("Cache-Control"))):
		return true
	}
	for _, h := range hopByHop {
		if len(name) == len(h) && bytes.EqualFold(name, []byte(h)) {
			return true
		}
	}
	for _, h := range named {
		if bytes.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// transportWatch is the watch of an exchange through the transport,
// whose context carries the deadline.
type transportWatch struct {
	st     *fastState
	cancel context.CancelFunc
}

func (transportWatch) Slow() {}

func (w transportWatch) Gone() {
	w.st.gone.Store(true)
	w.cancel()
}

// viaTransport forwards through the configured http.RoundTripper (https
// engines): the same exchange with a context for cancellation.
func (f *fast) viaTransport(hx *h1server.Exchange, st *fastState, body []byte, stream bool) error {
	p, x, h := f.p, &st.x, &hx.Head
	reqURL := &url.URL{Path: string(h.Path), RawQuery: string(h.Query)}
	x.target = Target(x.route, reqURL)
	sent := time.Now()
	deadline := sent.Add(p.cfg.Timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	x.flight = p.inflight.add(x.model, x.route.Group, int64(len(body)), stream, x.start)
	x.mm = p.m.model(x.model)
	x.mm.gauge().Inc()
	hx.Watch(deadline.Add(time.Second), transportWatch{st, cancel})
	in := http.Header{}
	for _, k := range forwarded {
		if v := h.Get(k); v != nil {
			in[k] = []string{string(v)}
		}
	}
	resp, err := p.transport.RoundTrip(upstreamRequest(ctx, x.target, body, in))
	if err != nil {
		if st.gone.Load() {
			return errClientGone
		}
		return classifyUpstream(err, context.Background(), ctx, x)
	}
	defer resp.Body.Close()
	out := http.Header{}
	copyResponseHeader(out, resp.Header)
	isStream := isEventStream(resp.Header.Get("Content-Type"))
	if isStream {
		markStream(out)
	}
	out.Del("Content-Length")
	var sb strings.Builder
	_ = out.Write(&sb)
	st.hdr = append(st.hdr[:0], sb.String()...)
	err = st.relay(hx, resp.StatusCode, resp.ContentLength, out.Get("Date") != "", isStream, resp.Body, sent)
	if err != nil && ctx.Err() == context.DeadlineExceeded && !errors.Is(err, errClientGone) {
		return &Error{Status: http.StatusGatewayTimeout, Code: "upstream_timeout",
			Message: fmt.Sprintf("upstream %s of group %q did not finish within SERVING_TIMEOUT_S (%s); the request was cancelled", x.upstream(), x.route.Group, x.timeout)}
	}
	return err
}
