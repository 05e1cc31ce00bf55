// Package proxy is the router's data path: it reads the model from a POST
// body, looks it up in the current route snapshot, and relays the request
// to the engine serving it, streaming the answer back frame by frame.
//
// A request is sent upstream exactly once. The body is held in memory, so
// a request none of whose bytes were written (a pooled connection found
// dead first) may go out on another connection, but never one of which
// any byte was written. Plain-HTTP engines are reached through the
// proxy's own HTTP/1.1 client (upstream.go), which does the exchange in
// the handler's goroutine; a configured Config.Transport, and https
// engines, go through an http.RoundTripper with the same rules.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/h1client"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// Defaults for Config and the upstream transport.
const (
	// DefaultMaxBody is the largest request body, 128 MiB.
	DefaultMaxBody = 128 << 20
	// DefaultTimeout is SERVING_TIMEOUT_S's default, 30 minutes.
	DefaultTimeout = 30 * time.Minute
	// IdleConnTimeout keeps pooled upstream connections for less time than
	// uvicorn's 5 s keep-alive, so the router drops a connection before
	// the engine does and never sends a request into one being closed.
	IdleConnTimeout = 2 * time.Second
	// MaxIdleConnsPerHost is generous: every concurrent stream to an
	// engine holds a connection, and re-dialling after a burst is waste.
	MaxIdleConnsPerHost = 256
	// DialTimeout bounds connecting to an engine (never the answer); an
	// address that drops SYNs would otherwise hold a request for the
	// whole SERVING_TIMEOUT_S.
	DialTimeout = 10 * time.Second
)

// Config is the proxy's configuration. The zero value is usable.
type Config struct {
	// MaxBody is the largest request body accepted, in bytes; larger is
	// refused with 413. Zero or negative means DefaultMaxBody (128 MiB).
	MaxBody int64
	// Timeout bounds one upstream request from sending it to the last
	// byte of the answer, streams included (SERVING_TIMEOUT_S). Zero or negative
	// means DefaultTimeout (30 min). It is the only deadline: the client
	// connection's read and write deadlines are lifted to it, and there is
	// no separate response-header timeout.
	Timeout time.Duration
	// Transport sends upstream requests. Nil means NewTransport(). A
	// custom transport must not retry requests whose bytes were written.
	Transport http.RoundTripper
}

func (c Config) withDefaults() Config {
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// NewTransport returns the upstream transport the proxy uses by default:
// plain HTTP/1.1 keep-alive to engines, no environment proxy, no
// compression (frames pass through as the engine wrote them), idle
// connections dropped before the engines' keep-alive expires, and no
// timeout but the dial's (the request context carries SERVING_TIMEOUT_S).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   DialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        0, // no total cap; per host below
		MaxIdleConnsPerHost: MaxIdleConnsPerHost,
		IdleConnTimeout:     IdleConnTimeout,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		ReadBufferSize:      copyBufSize,
		WriteBufferSize:     copyBufSize,
	}
}

// Proxy routes POST requests by model. It is an http.Handler; create it
// with New.
type Proxy struct {
	src       routes.Source
	cfg       Config
	log       *slog.Logger
	transport http.RoundTripper
	// h1 sends to plain-HTTP engines when no Transport was configured:
	// in the handler's goroutine, about 10 µs a request less than the
	// Transport's.
	h1       *h1client.Client
	inflight *Inflight
	m        *metrics
}

// New returns a proxy reading routes from src. Metrics are registered on
// reg (nil: not registered). Call Close when done to drop pooled upstream
// connections.
func New(src routes.Source, cfg Config, logger *slog.Logger, reg prometheus.Registerer) *Proxy {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{src: src, cfg: cfg, log: logger, transport: cfg.Transport,
		inflight: newInflight(), m: newMetrics(reg)}
	if p.transport == nil {
		p.transport = NewTransport()
		p.h1 = h1client.New(h1client.Options{
			DialTimeout:    DialTimeout,
			IdleTimeout:    IdleConnTimeout,
			MaxIdlePerHost: MaxIdleConnsPerHost,
			UserAgent:      userAgent[0],
		})
	}
	return p
}

// Inflight is the registry of requests being proxied now.
func (p *Proxy) Inflight() *Inflight { return p.inflight }

// Close drops idle upstream connections. Requests still running are not
// affected; the proxy stays usable.
func (p *Proxy) Close() {
	if p.h1 != nil {
		p.h1.CloseIdle()
	}
	if c, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// exchange is one request's state, shared by serve, fail and finish.
type exchange struct {
	start time.Time
	// model is the metrics label: "" until a group is known to serve it.
	model  string
	code   int
	route  *routes.Route
	target *url.URL
	// head is the fast path's upstream request head (it has no target).
	head    []byte
	timeout time.Duration
	flight  *flight
	// mm is the model's metrics, set with flight.
	mm *modelMetrics
	// headersOut is set once the upstream status line went to the client;
	// after that an error can only cut the response.
	headersOut bool
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{start: time.Now(), timeout: p.cfg.Timeout}
	// finish runs on every path, including the ErrAbortHandler panic.
	defer p.finish(r, x)
	if err := p.serve(w, r, x); err != nil {
		p.fail(w, r, x, err)
	}
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, x *exchange) error {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: fmt.Sprintf("%s %s is not routed: the router forwards POST requests whose body names a model", r.Method, r.URL.Path)}
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// The model cannot be read from a compressed body, and the header
		// is not forwarded.
		return &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_content_encoding",
			Message: fmt.Sprintf("request bodies with Content-Encoding %q are not supported; send the body uncompressed", ce)}
	}
	body, err := p.readBody(r)
	if err != nil {
		return err
	}
	f, err := extract(r.Header.Get("Content-Type"), body)
	if err != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Param: "model", Message: err.Error()}
	}
	if err := p.route(x, f.Model); err != nil {
		return err
	}
	x.target = Target(x.route, r.URL)
	return p.forward(w, r, x, body, f.Stream)
}

// route looks the model up in the current snapshot and sets x's model
// and route, or returns the refusal (see Refusal).
func (p *Proxy) route(x *exchange, model string) error {
	snap := p.src.Load()
	rt, g := snap.Lookup(model)
	if rt == nil {
		if g != nil {
			x.model = model
		}
		return Refusal(snap, model)
	}
	x.model, x.route = model, rt
	return nil
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, x *exchange, body []byte, stream bool) error {
	// The clock starts when the request goes upstream: a slow upload is
	// not generation time.
	sent := time.Now()
	deadline := sent.Add(p.cfg.Timeout)
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()

	// Put the client connection's write deadline at ours: a server
	// WriteTimeout would otherwise cut a long generation, and with none a
	// client that stopped reading would block the copy for ever (a context
	// cannot unblock a write). Unset on exit so a later request on this
	// keep-alive connection starts clean. The read deadline is lifted too:
	// net/http's HTTP/1 server does so itself once the body is read, other
	// servers may not, and an expiring read would end the request context.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(deadline.Add(time.Second))
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()

	x.flight = p.inflight.add(x.model, x.route.Group, int64(len(body)), stream, x.start)
	x.mm = p.m.model(x.model)
	x.mm.gauge().Inc()

	var resp *http.Response
	var err error
	if p.h1 != nil && p.h1.Handles(x.target) {
		resp, err = p.h1.RoundTrip(ctx, &h1client.Request{Target: x.target, Header: r.Header, Keys: forwarded, Body: body})
	} else {
		resp, err = p.transport.RoundTrip(upstreamRequest(ctx, x.target, body, r.Header))
	}
	if err != nil {
		return classifyUpstream(err, r.Context(), ctx, x)
	}
	defer resp.Body.Close()

	h := w.Header()
	copyResponseHeader(h, resp.Header)
	flush := resp.ContentLength < 0
	if isEventStream(resp.Header.Get("Content-Type")) {
		x.flight.stream.Store(true)
		markStream(h)
		flush = true
	}
	w.WriteHeader(resp.StatusCode)
	x.code, x.headersOut = resp.StatusCode, true

	var flushFn func() error
	if flush {
		flushFn = rc.Flush
		// The status line goes out now, not with the first frame.
		if err := rc.Flush(); err != nil {
			return p.afterHeaders(r, ctx, errClientGone)
		}
	}
	readErr, writeErr := x.relay(w, flushFn, resp.Body, sent)
	switch {
	case writeErr != nil:
		return p.afterHeaders(r, ctx, errClientGone)
	case readErr != nil:
		return p.afterHeaders(r, ctx, classifyUpstream(readErr, r.Context(), ctx, x))
	}
	return nil
}

// relay copies the engine's answer to dst (see relay), recording the
// first byte (in-flight row and time-to-first-byte since sent) and the
// bytes written.
func (x *exchange) relay(dst io.Writer, flush func() error, src io.Reader, sent time.Time) (readErr, writeErr error) {
	fl, mm := x.flight, x.mm
	first := func() {
		now := time.Now()
		fl.firstByte.Store(max(int64(now.Sub(fl.start)), 1))
		mm.firstByte().Observe(now.Sub(sent).Seconds())
	}
	wrote := func(n int) { fl.outBytes.Add(int64(n)) }
	return relay(dst, flush, src, first, wrote)
}

// afterHeaders maps an error once the response has begun: a client write
// that failed because our deadline passed is a timeout, not a hang-up.
func (p *Proxy) afterHeaders(r *http.Request, ctx context.Context, err error) error {
	if errors.Is(err, errClientGone) && r.Context().Err() == nil && ctx.Err() == context.DeadlineExceeded {
		return &Error{Status: http.StatusGatewayTimeout, Code: "upstream_timeout",
			Message: "the client did not read the answer within SERVING_TIMEOUT_S"}
	}
	return err
}

// readBody reads the whole body, refusing one over MaxBody: from
// Content-Length before reading when declared, else at the limit.
func (p *Proxy) readBody(r *http.Request) ([]byte, error) {
	limit := p.cfg.MaxBody
	if r.ContentLength > limit {
		return nil, tooLarge(r.ContentLength, limit)
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, nil
	}
	want, hint := limit+1, int64(512)
	if r.ContentLength > 0 {
		want = r.ContentLength
		// A declared length is a promise, not bytes: pre-size only up to
		// 1 MiB so a client cannot make the router allocate 128 MiB by
		// sending a header.
		hint = min(r.ContentLength, 1<<20)
	}
	body, err := readAll(io.LimitReader(r.Body, want), hint)
	if err != nil {
		if r.Context().Err() != nil {
			return nil, errClientGone
		}
		return nil, &Error{Status: http.StatusBadRequest, Code: "unreadable_body",
			Message: fmt.Sprintf("could not read the request body: %v; send the whole body (Content-Length must match)", err), Cause: err}
	}
	if int64(len(body)) > limit {
		return nil, tooLarge(-1, limit)
	}
	return body, nil
}

func tooLarge(declared, limit int64) error {
	msg := fmt.Sprintf("request body is larger than the %d-byte limit (%s); send a smaller body", limit, mib(limit))
	if declared >= 0 {
		msg = fmt.Sprintf("request body of %d bytes (Content-Length) is larger than the %d-byte limit (%s); send a smaller body", declared, limit, mib(limit))
	}
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large", Message: msg}
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// readAll is io.ReadAll with an initial capacity.
func readAll(r io.Reader, hint int64) ([]byte, error) {
	b := make([]byte, 0, hint+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// fail is the one place a failed request is answered and logged.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, x *exchange, err error) {
	if errors.Is(err, errClientGone) {
		x.code = StatusClientClosed
		p.log.Debug("proxy_client_gone", "model", x.model, "path", r.URL.Path, "elapsed", time.Since(x.start))
		return
	}
	e := asError(err)
	p.logFailure(x, r.URL.Path, e)
	if x.headersOut {
		// The status line is out: the only honest signal left is to cut
		// the connection, so the client cannot take a truncated answer
		// for a complete one.
		panic(http.ErrAbortHandler)
	}
	if e.Status == http.StatusRequestEntityTooLarge {
		// The rest of the body was not read; the connection cannot carry
		// another request.
		w.Header().Set("Connection", "close")
	}
	WriteError(w, e)
}

// asError is err as the client's answer: an *Error, or a 500.
func asError(err error) *Error {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Code: "internal_error",
			Message: "the router failed while proxying this request", Cause: err}
	}
	return e
}

// logFailure records e as x's outcome and logs it: a cut stream or an
// upstream failure as a warning, a refusal at debug.
func (p *Proxy) logFailure(x *exchange, path string, e *Error) {
	x.code = e.Status
	args := []any{"model", x.model, "path", path, "status", e.Status, "code", e.Code}
	if x.route != nil {
		args = append(args, "group", x.route.Group, "upstream", x.upstream())
	}
	if e.Cause != nil {
		args = append(args, "err", e.Cause)
	}
	switch {
	case x.headersOut:
		p.log.Warn("proxy_stream_cut", args...)
	case e.Status >= 500 && e.Status != http.StatusServiceUnavailable:
		p.log.Warn("proxy_upstream_failed", args...)
	default:
		p.log.Debug("proxy_refused", append(args, "message", e.Message)...)
	}
}

// upstream is the request's upstream URL for logs and messages.
func (x *exchange) upstream() string {
	if x.target != nil {
		return x.target.Redacted()
	}
	return "http://" + x.route.Base.Host + upstreamURI(x.head)
}

// finish records the outcome; it runs however the handler ends.
func (p *Proxy) finish(r *http.Request, x *exchange) {
	p.record(x)
	// Checked first: building the arguments costs allocations even when
	// the line is dropped.
	if p.log.Enabled(r.Context(), slog.LevelDebug) {
		p.log.Debug("proxy_request", "model", x.model, "path", r.URL.Path, "status", x.code, "elapsed", time.Since(x.start))
	}
}

// record ends x's in-flight row and counts its outcome.
func (p *Proxy) record(x *exchange) {
	if x.flight != nil {
		p.inflight.remove(x.flight)
		x.mm.gauge().Dec()
	}
	if x.code == 0 {
		x.code = http.StatusOK
	}
	mm := x.mm
	if mm == nil {
		mm = p.m.model(x.model)
	}
	mm.done(x.code)
}

// upstreamRequest builds the engine's request on the resolved URL
// directly, instead of printing it and parsing it back. Its body is
// rewindable (GetBody), so the transport can resend a request it never
// wrote on a stale pooled connection.
func upstreamRequest(ctx context.Context, target *url.URL, body []byte, in http.Header) *http.Request {
	// An empty URL always parses; NewRequestWithContext is the only way to
	// attach ctx without copying the request.
	up, _ := http.NewRequestWithContext(ctx, http.MethodPost, "", nil)
	up.URL = target
	up.Host = strings.TrimSuffix(target.Host, ":")
	fillUpstreamHeader(up.Header, in)
	if len(body) > 0 {
		up.Body = newBodyReader(body)
		up.ContentLength = int64(len(body))
		up.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }
	}
	return up
}

// bodyReader is a request body over bytes already in memory.
type bodyReader struct{ bytes.Reader }

func newBodyReader(b []byte) *bodyReader {
	r := &bodyReader{}
	r.Reset(b)
	return r
}

func (*bodyReader) Close() error { return nil }

var _ http.Handler = (*Proxy)(nil)
