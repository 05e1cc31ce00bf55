package gateway

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/h1client"
	"github.com/fe64bb06/frontdoor/internal/h1server"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// Fast returns the gateway's fast path for an h1server.Server whose
// Fallback serves the gateway (ServeHTTP): inference requests (POST
// /v1/models/{id}/infer and POST {server_uri}) with the right token whose
// whole body came with the head are forwarded without net/http, with the
// same answers, headers and metrics. Everything else — jobs, GETs, a
// wrong token, a body still arriving (streamed by ServeHTTP so the model
// server's deadline governs a slow client) — is left to ServeHTTP.
func (g *Gateway) Fast() h1server.Handler { return &fast{g: g} }

type fast struct{ g *Gateway }

// Take implements h1server.Handler.
func (f *fast) Take(h *h1server.Head) bool {
	g := f.g
	if g.h1 == nil || string(h.Method) != http.MethodPost || h.ContentLength > g.cfg.MaxBody || h.ContentLength > h.Buffered {
		return false
	}
	if g.fastRoute(h.Path) == nil || h.Count("Authorization") != 1 || h.Count("X-Forwarded-For") > 1 {
		return false
	}
	for _, k := range forwardRequestHeaders {
		if h.Count(k) > 1 {
			return false
		}
	}
	tok, ok := bearerValue(h.Get("Authorization"))
	return ok && subtle.ConstantTimeCompare(tok, []byte(g.cfg.Token)) == 1
}

// bearerValue is bearerToken on a raw field value.
func bearerValue(v []byte) ([]byte, bool) {
	const prefix = "bearer "
	if len(v) <= len(prefix) || !strings.EqualFold(string(v[:len(prefix)]), prefix) {
		return nil, false
	}
	return bytes.TrimSpace(v[len(prefix):]), true
}

// fastRoute is the upstream the mux would forward a POST to path to, for
// the inference routes only; nil otherwise (including paths the mux would
// clean or unescape first).
func (g *Gateway) fastRoute(p []byte) *Upstream {
	if !plainPath(string(p)) || !h1server.CleanPath(p) {
		return nil
	}
	const models, infer = "/v1/models/", "/infer"
	if bytes.HasPrefix(p, []byte(models)) {
		id := p[len(models):]
		if !bytes.HasSuffix(id, []byte(infer)) {
			return nil
		}
		id = id[:len(id)-len(infer)]
		if len(id) == 0 || bytes.IndexByte(id, '/') >= 0 {
			return nil
		}
		return g.byID[string(id)]
	}
	if string(p) == "/healthz" || string(p) == "/metrics" {
		return nil
	}
	return g.byURI[string(p)]
}

// fastState is one request's working memory, pooled.
type fastState struct {
	g    *Gateway
	call h1client.Call
	head []byte
	body []byte
	hdr  []byte
	gone atomic.Bool
	// mu orders Slow against the response head's arrival: the header
	// timeout bounds only the wait for it.
	mu       sync.Mutex
	headDone bool
	slowed   bool
	start    time.Time
}

var fastStates = sync.Pool{New: func() any { return &fastState{} }}

// maxPooledBody is the largest body buffer kept for reuse.
const maxPooledBody = 64 << 10

// Slow implements h1server.Watcher: past a moment, the wait for the
// model's response head gets its timeout.
func (st *fastState) Slow() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.headDone {
		st.slowed = true
		st.call.SetDeadline(st.start.Add(st.g.cfg.ResponseHeaderTimeout))
	}
}

// Gone implements h1server.Watcher: the client hung up; the model's
// request ends at once.
func (st *fastState) Gone() {
	st.gone.Store(true)
	st.call.Abort()
}

// Serve implements h1server.Handler.
func (f *fast) Serve(x *h1server.Exchange) {
	g := f.g
	u := g.fastRoute(x.Head.Path)
	ust := g.up[u]
	st := fastStates.Get().(*fastState)
	st.g, st.start, st.headDone, st.slowed = g, time.Now(), false, false
	st.gone.Store(false)
	defer func() {
		// Before st goes back to the pool: a watch ending later could
		// call st's Gone for another request.
		x.Unwatch()
		if cap(st.body) > maxPooledBody {
			st.body = nil
		}
		fastStates.Put(st)
	}()

	n := x.Head.ContentLength
	if int64(cap(st.body)) < n {
		st.body = make([]byte, n)
	}
	body := st.body[:n]
	if _, err := io.ReadFull(x, body); err != nil {
		// Take saw the whole body buffered; only a broken connection ends
		// here.
		g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
		x.Abort()
		return
	}
	st.head = appendModelHead(st.head[:0], u, ust, &x.Head, x.RemoteAddr(), len(body))
	x.Watch(time.Time{}, st)

	call := &st.call
	defer call.Close()
	// First of the two: once the watch is over, nothing can abort the
	// Call after its Close (a reused Call would start aborted).
	defer x.Unwatch()
	err := g.h1.Send(call, u.Addr, st.head, body)
	st.mu.Lock()
	st.headDone = true
	if st.slowed && err == nil {
		call.SetDeadline(time.Time{})
	}
	st.mu.Unlock()
	if err != nil {
		st.failed(x, u, ust, err)
		return
	}
	flush := call.ContentLength < 0 || isEventStream(call.Get("Content-Type"))
	var hasDate bool
	st.hdr, hasDate = appendAnswerHeader(st.hdr[:0], call.Header, u.ID)
	if err := x.WriteHead(h1server.Response{Status: call.Status, Header: st.hdr, ContentLength: call.ContentLength, HasDate: hasDate}); err != nil {
		g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
		x.Abort()
		return
	}
	if flush && x.Flush() != nil {
		g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
		x.Abort()
		return
	}
	var flushFn func() error
	if flush {
		flushFn = x.Flush
	}
	if err := copyBody(x, call, flushFn); err != nil {
		if st.gone.Load() || errors.Is(err, errClientWrite) {
			g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
		} else {
			g.log.Warn("gateway_upstream_broke_mid_response", "model", u.ID, "err", err)
			g.metrics.upstreamErrors.WithLabelValues(u.ID, "mid_response").Inc()
		}
		x.Abort()
		return
	}
	ust.request(call.Status)
	ust.observe(time.Since(st.start).Seconds())
}

// failed answers a request whose model exchange failed before its
// answer, as upstreamError does for ServeHTTP.
func (st *fastState) failed(x *h1server.Exchange, u *Upstream, ust *upstreamState, err error) {
	g := st.g
	switch {
	case st.gone.Load():
		g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
		x.Abort()
	case errors.Is(err, syscall.ECONNREFUSED):
		writeFastEnvelope(x, http.StatusServiceUnavailable, statusNotReady,
			refusedMessage(u),
			"Retry-After: 1\r\n")
		g.metrics.upstreamErrors.WithLabelValues(u.ID, "refused").Inc()
		ust.request(http.StatusServiceUnavailable)
	default:
		var ne net.Error
		if st.slowed && errors.As(err, &ne) && ne.Timeout() {
			err = h1client.ErrResponseHeaderTimeout
		}
		err = &url.Error{Op: "Post", URL: "http://" + u.Addr + requestTarget(st.head), Err: err}
		g.log.Warn("gateway_upstream_failed", "model", u.ID, "addr", u.Addr, "err", err)
		writeFastEnvelope(x, http.StatusBadGateway, statusServerError,
			fmt.Sprintf("model %s at %s failed before answering: %v", u.ID, u.Addr, trimErr(err)), "")
		g.metrics.upstreamErrors.WithLabelValues(u.ID, "transport").Inc()
		ust.request(http.StatusBadGateway)
	}
}

// requestTarget is the target of a request head's first line.
func requestTarget(head []byte) string {
	_, rest, _ := bytes.Cut(head, []byte(" "))
	t, _, _ := bytes.Cut(rest, []byte(" "))
	return string(t)
}

// writeFastEnvelope is writeEnvelope on an exchange; extra holds more
// field lines.
func writeFastEnvelope(x *h1server.Exchange, httpCode int, st envelope.Status, msg, extra string) {
	b := append(envelopeJSON(st, msg, ""), '\n')
	hdr := "Content-Type: application/json; charset=utf-8\r\nCache-Control: no-store\r\n" + extra
	_ = x.WriteHead(h1server.Response{Status: httpCode, Header: []byte(hdr), ContentLength: int64(len(b))})
	_, _ = x.Write(b)
}

// envelopeJSON is the rejection envelope; msg goes in errors[0].
func envelopeJSON(st envelope.Status, msg, taskID string) []byte {
	env := gatewayEnvelope{Status: st, StatusStr: envelope.Text(st), TaskID: taskID, Results: []any{}}
	if msg != "" {
		env.Errors = []errorItem{{Pointer: "", Message: msg}}
	}
	b, _ := json.Marshal(env)
	return b
}

// appendModelHead writes the model server's request head as the
// in-goroutine client writes it for ServeHTTP: the server_uri with the
// client's query, Host, the client's User-Agent, the forwarded fields,
// the model's own token, X-Forwarded-For and the body's length.
func appendModelHead(b []byte, u *Upstream, ust *upstreamState, h *h1server.Head, remote net.Addr, n int) []byte {
	b = append(b, "POST "...)
	b = append(b, u.URI...)
	if len(h.Query) > 0 {
		b = append(b, '?')
		b = append(b, h.Query...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, u.Addr...)
	b = append(b, "\r\nUser-Agent: "...)
	b = append(b, h1client.DefaultUserAgent...)
	b = append(b, "\r\n"...)
	for _, k := range forwardRequestHeaders {
		if v := h.Get(k); v != nil {
			b = appendField(b, k, v)
		}
	}
	if ust.auth != nil {
		b = appendField(b, "Authorization", []byte(ust.auth[0]))
	}
	b = appendForwardedFor(b, h.Get("X-Forwarded-For"), remote)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n\r\n"...)
}

func appendField(b []byte, k string, v []byte) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, v...)
	return append(b, "\r\n"...)
}

// appendForwardedFor writes the X-Forwarded-For forwardedFor computes.
func appendForwardedFor(b, prior []byte, remote net.Addr) []byte {
	var ip netip.Addr
	switch a := remote.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
		if ip.Is4In6() {
			ip = ip.Unmap()
		}
		if a.Zone != "" {
			ip = ip.WithZone(a.Zone)
		}
	default:
		host, _, err := net.SplitHostPort(remote.String())
		if err != nil {
			if len(prior) > 0 {
				return appendField(b, "X-Forwarded-For", prior)
			}
			return b
		}
		ip, _ = netip.ParseAddr(host)
	}
	if ip.Zone() == "" && ip.Unmap().IsLoopback() && len(prior) > 0 {
		return appendField(b, "X-Forwarded-For", prior)
	}
	b = append(b, "X-Forwarded-For: "...)
	if len(prior) > 0 {
		b = append(b, prior...)
		b = append(b, ", "...)
	}
	b = ip.AppendTo(b)
	return append(b, "\r\n"...)
}

// appendAnswerHeader writes the model's response fields the client gets
// (ServeHTTP's rule: all but hop-by-hop ones; the framing is the
// server's) and X-Mortred-Model. It reports whether a Date was kept.
func appendAnswerHeader(b, upstream []byte, id string) ([]byte, bool) {
	hasDate := false
	for rest := upstream; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		name, _, _ := bytes.Cut(line, []byte(":"))
		if dropAnswerField(name) {
			continue
		}
		if bytes.EqualFold(name, []byte("Date")) {
			hasDate = true
		}
		b = append(b, line...)
	}
	b = append(b, "X-Mortred-Model: "...)
	b = append(b, id...)
	return append(b, "\r\n"...), hasDate
}

func dropAnswerField(name []byte) bool {
	if bytes.EqualFold(name, []byte("Content-Length")) || bytes.EqualFold(name, []byte("X-Mortred-Model")) {
		return true
	}
	for _, h := range hopByHop {
		if len(name) == len(h) && bytes.EqualFold(name, []byte(h)) {
			return true
		}
	}
	return false
}

// isEventStream reports whether a Content-Type value is an event stream.
func isEventStream(ct []byte) bool {
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	return bytes.EqualFold(bytes.TrimSpace(mt), []byte("text/event-stream"))
}
