// Package proxy is the router's data path: it reads the model from a POST
// body, looks it up in the current route snapshot, lets the balancer order
// the model's replicas, and relays the request to the first one that
// accepts the connection, streaming the answer back frame by frame.
//
// A replica that refuses the connection (the dial failed: nothing was
// sent) is marked refused and the request goes to the next replica at
// once. Once a connection is up, the request is never sent elsewhere.
//
// A request is sent upstream exactly once. The body is read once into a
// pooled buffer (httpx.ReadBody), so a request none of whose bytes were
// written (a pooled connection found dead first) may go out on another
// connection, but never one of which any byte was written: that is the
// rule of the engines' http.Transport (httpx.NewTransport).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
	"github.com/fe64bb06/frontdoor/mentat/serve/upstream"
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
	// Edge is the listener's limits: the proxy applies BodyTimeout while
	// it reads a body and WriteTimeout to answers that are not streams
	// (zero fields: the httpx defaults).
	Edge httpx.Limits
	// Balancer orders a model's replicas. Nil means a balancer with the
	// default policy (prefix), registered on the proxy's registry.
	Balancer *balance.Balancer
	// Keys is set when the router authenticates requests (SERVE_KEYS_FILE):
	// the client's Authorization header, a key of the router, is then
	// never forwarded. A request's key itself comes in its context
	// (keys.NewContext); with it the proxy applies the key's scope and
	// limits and charges its usage.
	Keys bool
	// Upstream are the keys sent to each group's engine
	// (SERVE_UPSTREAM_KEYS_FILE) in place of any client Authorization;
	// nil sends none.
	Upstream *upstream.Keys
	// Flow holds requests while every replica of their model is
	// saturated (FLOW_CONTROL); nil lets every request go at once.
	Flow *flow.Controller
	// KeepAlive is SSE_KEEPALIVE_S: a streamed request that waits longer
	// (in flow control, or for its engine's first byte) gets an SSE
	// comment line every KeepAlive. Zero: none.
	KeepAlive time.Duration
	// ModelWait is MODEL_WAIT_S: a request for a model that routed in the
	// last RecentlyServed but has no routable replica now waits up to
	// this long for one to come back. Zero: answered at once.
	ModelWait time.Duration
	// Stop is the router's hard stop (serve.Server.HardStop): done when a
	// stop's SERVE_SHUTDOWN_S has passed. Every request's context must
	// derive from it (the server's BaseContext does), since that is how a
	// waiting or relaying request learns of it; a request whose context
	// ends while Stop is done is ended by the proxy (stop.go) rather than
	// treated as a client that left. Nil: no hard stop.
	Stop context.Context
	// Ready is closed once the router's first round of discovery and
	// admission is over (serve.Server.Ready). Until then a request whose
	// model does not route waits for it, up to FirstRoundWait, instead of
	// being refused: a router just started gets traffic at once from a
	// balancer that does not read /readyz (Nginx OSS), before it knows
	// the engines. Nil: no wait.
	Ready <-chan struct{}
}

func (c Config) withDefaults() Config {
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Edge = c.Edge.WithDefaults()
	return c
}

// NewTransport returns the engines' transport (httpx.NewTransport: no
// environment proxy, no compression, a bounded answer head, sent once)
// with idle connections dropped before the engines' keep-alive expires,
// and no timeout but the dial's (the request context carries
// SERVING_TIMEOUT_S).
func NewTransport() *http.Transport {
	return httpx.NewTransport(httpx.TransportConfig{
		DialTimeout:         DialTimeout,
		IdleConnTimeout:     IdleConnTimeout,
		MaxIdleConnsPerHost: MaxIdleConnsPerHost,
	})
}

// Proxy routes POST requests by model. It is an http.Handler; create it
// with New.
type Proxy struct {
	src       routes.Source
	cfg       Config
	log       *slog.Logger
	transport http.RoundTripper
	bal       *balance.Balancer
	inflight  *Inflight
	m         *metrics
	// sessionKey is the balancer's session header in canonical form,
	// which http.Header.Get takes without converting (a copy per request).
	sessionKey string
	// fwdHeaders are the client headers an engine gets (forwarded, or
	// forwardedKeyed with keys on).
	fwdHeaders []string
	// served holds, with ModelWait, when each model last routed (unix
	// seconds, *atomic.Int64 by model name).
	served sync.Map
	// stopped counts what the hard stop ended (Stopped).
	stopped stopCounters
}

// New returns a proxy reading routes from src. Metrics are registered on
// reg (nil: not registered). Call Close when done to drop pooled upstream
// connections.
func New(src routes.Source, cfg Config, logger *slog.Logger, reg prometheus.Registerer) *Proxy {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{src: src, cfg: cfg, log: logger, transport: cfg.Transport, bal: cfg.Balancer,
		inflight: newInflight(), m: newMetrics(reg)}
	if p.transport == nil {
		p.transport = NewTransport()
	}
	if p.bal == nil {
		p.bal = balance.New(balance.Config{}, reg)
	}
	p.sessionKey = http.CanonicalHeaderKey(p.bal.Config().SessionHeader)
	p.fwdHeaders = forwarded
	if cfg.Keys {
		p.fwdHeaders = forwardedKeyed
	}
	return p
}

// Inflight is the registry of requests being proxied now.
func (p *Proxy) Inflight() *Inflight { return p.inflight }

// Balancer is the replica balancer in use.
func (p *Proxy) Balancer() *balance.Balancer { return p.bal }

// Close drops idle upstream connections. Requests still running are not
// affected; the proxy stays usable.
func (p *Proxy) Close() {
	if c, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// exchange is one request's state, shared by serve, fail and finish.
type exchange struct {
	start time.Time
	// model is the metrics label: "" until a group is known to serve it.
	model string
	code  int
	// route is the replica being tried (the first in the balancer's
	// order until one refuses); replicas is the model's whole list.
	route    *routes.Route
	replicas []*routes.Route
	target   *url.URL
	timeout  time.Duration
	flight   *flight
	// ticket counts the request on its replica until it ends.
	ticket *balance.Ticket
	// mm is the model's metrics, set with flight.
	mm *modelMetrics
	// headersOut is set once the upstream status line went to the client;
	// after that an error can only cut the response.
	headersOut bool
	// body and blocks are the request's pooled buffers (body, prompt
	// routing keys), held until release.
	body   *httpx.Body
	blocks *balance.Blocks
	// grant is the request's admission by its key (nil with keys off),
	// ended by record; promptBytes is the prompt's size in the body, for
	// a stream's estimated usage.
	grant       *keys.Grant
	promptBytes int
	// adm is the request's admission by flow control (nil with it off),
	// ended by record with tokens, the answer's tokens as metered.
	adm    *flow.Admission
	tokens int64
	// ka sends a waiting stream comments (SSE_KEEPALIVE_S); nil when off
	// or not a stream.
	ka *keepAlive
	// tail follows the end of an event stream, with a hard stop
	// configured (Config.Stop): where a cut may add an error event.
	tail sseTail
}

// release gives the request's pooled buffers back, once: answer does as
// soon as the answer's head is in, so a stream open for minutes holds
// neither; ServeHTTP's deferred call covers every other path.
func (x *exchange) release() {
	if x.body != nil {
		x.body.Release()
		x.body = nil
	}
	balance.PutBlocks(x.blocks)
	x.blocks = nil
}

// ServeHTTP implements http.Handler. A request is answered in two calls:
// open does everything up to the engine's answer head, answer relays it.
// They are separate frames for the memory of open streams: a stream parks
// this goroutine inside the relay for as long as it lasts, and the
// collector keeps a parked goroutine's stack at the power of two above
// four times what its live frames use. With the work before the answer
// head (and its locals) in a call that has returned, the frames of a
// relaying handler, net/http's and the router's middleware included, stay
// under 4 KiB, and its stack at 8 KiB instead of 16 (TestIdleStreamMemory
// and bench/streams).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{start: time.Now(), timeout: p.cfg.Timeout}
	// finish runs on every path, including the ErrAbortHandler panic.
	defer p.finish(r, x)
	// The request body's buffer and routing keys go back to their pools
	// as soon as the answer's head is in (answer calls release): a
	// stream may stay open for minutes and needs neither. The buffer goes
	// back only when both this handler and the transport (which may close
	// the request body after RoundTrip returns) are done with it.
	defer x.release()
	// Stopped before the handler returns: no comment after it.
	defer x.ka.stop()
	var a upstreamAnswer
	err := p.open(w, r, x, &a)
	if err == nil {
		err = p.answer(w, r, x, &a)
	}
	if err != nil {
		p.fail(w, r, x, err)
	}
}

// upstreamAnswer is an engine's answer head and what relaying it needs:
// the exchange's context (cancel it when done), when the request went
// upstream and its SERVING_TIMEOUT_S deadline.
type upstreamAnswer struct {
	resp     *http.Response
	ctx      context.Context
	cancel   context.CancelFunc
	sent     time.Time
	deadline time.Time
}

// open reads the request, routes it, applies its key and flow control,
// sends it and puts the engine's answer head in a.
func (p *Proxy) open(w http.ResponseWriter, r *http.Request, x *exchange, a *upstreamAnswer) error {
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
	body, err := p.readBody(w, r)
	if err != nil {
		return err
	}
	x.body = body
	f, err := extract(r.Header.Get("Content-Type"), body.Bytes())
	if err != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_body", Param: "model", Message: err.Error()}
	}
	key := keys.FromContext(r.Context())
	x.promptBytes = len(f.Messages) + len(f.Prompt) + len(f.Input)
	if x.promptBytes == 0 {
		x.promptBytes = body.Len()
	}
	if key != nil {
		if err := p.admit(w, x, key, f.Model); err != nil {
			return err
		}
	}
	if f.Stream && p.cfg.KeepAlive > 0 {
		x.ka = newKeepAlive(w, p.cfg.KeepAlive)
	}
	if err := p.routeOrWait(r.Context(), x, f.Model, key); err != nil {
		return err
	}
	if p.cfg.Flow != nil {
		if err := p.waitTurn(w, r, x, key); err != nil {
			return err
		}
		if x.adm.Waited > 0 {
			// The replicas may have changed while it waited.
			if err := p.route(x, f.Model, key); err != nil {
				return err
			}
		}
	}
	x.blocks = balance.GetBlocks()
	req := routingRequest(x.model, &f, r.Header, p.sessionKey, x.blocks)
	d, first := p.bal.ChooseAndStart(x.replicas, req)
	x.ticket = first
	x.adm.Sent()
	// The clock starts when the request goes upstream: a slow upload is
	// not generation time.
	a.sent = time.Now()
	a.deadline = a.sent.Add(p.cfg.Timeout)
	a.ctx, a.cancel = context.WithDeadline(r.Context(), a.deadline)
	x.mm = p.m.model(x.model)
	x.mm.gauge().Inc()
	a.resp, err = p.send(a.ctx, r, x, body, f.Stream, d, req)
	if err != nil {
		err = classifyUpstream(err, r.Context(), a.ctx, x)
		a.cancel()
		return err
	}
	return nil
}

// route looks the model up in the current snapshot and sets x's model
// and route, or returns the refusal (see RefusalFor: what key k may see).
func (p *Proxy) route(x *exchange, model string, k *keys.Key) error {
	snap := p.src.Load()
	rt, g := snap.Lookup(model)
	if rt == nil {
		if g != nil {
			x.model = model
		}
		return RefusalFor(snap, model, k)
	}
	x.model, x.route, x.replicas = model, rt, snap.Replicas[model]
	if len(x.replicas) == 0 {
		x.replicas = []*routes.Route{rt} // a snapshot not built by routes.New
	}
	return nil
}

// answer relays the engine's answer a to the client: head writes its
// head, then its body goes through, frame by frame for an event stream.
// Only what the relay needs lives in this frame (see serve).
func (p *Proxy) answer(w http.ResponseWriter, r *http.Request, x *exchange, a *upstreamAnswer) error {
	var t relayTo
	defer t.end(a)
	x.release() // body and req are not used past here
	if err := p.head(w, r, x, a, &t); err != nil {
		return err
	}
	readErr, writeErr := x.relay(&t, a)
	switch {
	case writeErr != nil:
		return p.afterHeaders(r, a.ctx, errClientGone)
	case readErr != nil:
		return p.afterHeaders(r, a.ctx, classifyUpstream(readErr, r.Context(), a.ctx, x))
	}
	return nil
}

// relayTo is where answer copies an engine's body: dst, flushed after
// each write when flush is set; m meters it (keys or flow control on),
// and rc holds the write deadline head set.
type relayTo struct {
	dst    io.Writer
	flush  func() error
	m      *meter
	rc     *http.ResponseController
	events bool
}

// end undoes what head and open began, however the answer ended: the
// write deadline lifted (so that a later request on this keep-alive
// connection starts clean), the meter's charge, the engine's body closed
// and the exchange's context cancelled. One deferred call, not four,
// keeps answer's frame small (see ServeHTTP).
func (t *relayTo) end(a *upstreamAnswer) {
	if t.rc != nil {
		_ = t.rc.SetWriteDeadline(time.Time{})
	}
	if t.m != nil {
		t.m.finish(a.resp.StatusCode)
	}
	a.resp.Body.Close()
	a.cancel()
}

// head writes the client's answer head for the engine's answer a: the
// engine's fields (no hop-by-hop ones, no rate-limit ones with a key), the
// stream marks, the write deadline, the status line (flushed at once for
// a stream or an answer of unknown length). t is returned also with an
// error, for what answer must undo.
func (p *Proxy) head(w http.ResponseWriter, r *http.Request, x *exchange, a *upstreamAnswer, t *relayTo) error {
	resp := a.resp
	t.events = httpx.IsEventStream(resp.Header.Get("Content-Type"))
	// With SSE_KEEPALIVE_S, comments may already have committed a 200
	// event-stream head: an answer that is not one is then told as an
	// error event; one that is keeps the comments going until its first
	// byte, under a hold while its head is written.
	headOut, holding := false, false
	if x.ka != nil {
		if resp.StatusCode != http.StatusOK || !t.events {
			if x.ka.stop() {
				return upstreamAfterCommit(resp)
			}
		} else {
			headOut, holding = x.ka.hold(), true
		}
	}
	var wd time.Time
	defer func() {
		if holding {
			x.ka.releaseStream(wd)
		}
	}()

	h := w.Header()
	if x.grant != nil {
		// The key's headers, set at admission, not any an engine sent.
		keys.DropHeaders(resp.Header)
	}
	httpx.CopyResponseHeader(h, resp.Header)
	t.dst = w
	if x.grant != nil || x.adm != nil {
		t.m = newMeter(w, x, t.events, x.promptBytes)
		t.dst = t.m
	}
	flush := resp.ContentLength < 0
	if t.events {
		x.flight.stream.Store(true)
		markStream(h)
		flush = true
	}
	// The client connection's write deadline, set once the answer is here
	// (nothing is written to the client before): a stream gets ours, as a
	// server WriteTimeout would otherwise cut a long generation, and with
	// none a client that stopped reading would block the copy for ever (a
	// context cannot unblock a write); an answer that is not a stream gets
	// WriteTimeout, never more than SERVING_TIMEOUT_S.
	wd = a.deadline.Add(time.Second)
	if !flush {
		if d := time.Now().Add(p.cfg.Edge.WriteTimeout); d.Before(a.deadline) {
			wd = d
		}
	}
	t.rc = http.NewResponseController(w)
	_ = t.rc.SetWriteDeadline(wd)
	if !headOut {
		w.WriteHeader(resp.StatusCode)
	}
	x.code, x.headersOut = resp.StatusCode, true

	if flush {
		t.flush = t.rc.Flush
		// The status line goes out now, not with the first frame.
		if err := t.rc.Flush(); err != nil {
			return p.afterHeaders(r, a.ctx, errClientGone)
		}
	}
	if holding {
		holding = false
		x.ka.releaseStream(wd)
		t.dst = x.ka.writer(t.dst)
	}
	if t.events && p.cfg.Stop != nil {
		x.tail.on, x.tail.w = true, t.dst
		t.dst = &x.tail
	}
	return nil
}

// send tries the replicas in the balancer's order until one takes the
// connection, and returns its answer. Only a failed dial moves on: then
// nothing of the request was written, and the replica is marked refused
// (last in every order until a probe of it succeeds). Any other error,
// once a connection was up, ends the request there (sent once).
func (p *Proxy) send(ctx context.Context, r *http.Request, x *exchange, body *httpx.Body, stream bool, d balance.Decision, req balance.Request) (*http.Response, error) {
	for i, rt := range d.Order {
		x.route, x.target = rt, Target(rt, r.URL)
		if i > 0 {
			// The first attempt's ticket came with the decision
			// (ChooseAndStart).
			x.ticket = p.bal.Start(req, rt, balance.Refused, 0)
		}
		x.flight = p.inflight.add(x.model, rt.Group, int64(body.Len()), stream, x.start)
		hdr := buildUpstreamHeader(r.Header, p.fwdHeaders, p.cfg.Upstream.Authorization(rt.Group))
		resp, err := httpx.RoundTrip(p.transport, upstreamRequest(ctx, x.target, body, hdr))
		if err == nil || !notSent(err) {
			return resp, err
		}
		p.bal.Refuse(x.model, rt)
		if i == len(d.Order)-1 || ctx.Err() != nil {
			return nil, err
		}
		p.log.Warn("proxy_replica_refused", "model", x.model, "group", rt.Group, "upstream", x.upstream(),
			"next", d.Order[i+1].Group, "err", err)
		x.ticket.End()
		p.inflight.remove(x.flight)
	}
	panic("proxy: a route without replicas") // route never leaves x.replicas empty
}

// notSent reports whether a round trip failed before any byte of the
// request was written: the connection could not be made.
func notSent(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return (errors.As(err, &op) && op.Op == "dial") || errors.As(err, &dns)
}

// relay copies the engine's answer a to t (httpx.Relay, or for an event
// stream httpx.RelayEvents and its small buffer), recording the first byte
// (in-flight row and time-to-first-byte since a was sent) and the bytes
// written.
func (x *exchange) relay(t *relayTo, a *upstreamAnswer) (readErr, writeErr error) {
	fl, mm, sent := x.flight, x.mm, a.sent
	first := func() {
		now := time.Now()
		fl.firstByte.Store(max(int64(now.Sub(fl.start)), 1))
		mm.firstByte().Observe(now.Sub(sent).Seconds())
	}
	wrote := func(n int) { fl.outBytes.Add(int64(n)) }
	if t.events {
		return httpx.RelayEvents(t.dst, t.flush, a.resp.Body, first, wrote)
	}
	return httpx.Relay(t.dst, t.flush, a.resp.Body, first, wrote)
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

// readBody reads the whole body into a pooled buffer, refusing one over
// MaxBody (from Content-Length before reading when declared, else at the
// limit) and one not sent within the edge's BodyTimeout (408). The read
// deadline is lifted once the body is in: an expiring read deadline would
// end the request's context while the engine works.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) (*httpx.Body, error) {
	limit := p.cfg.MaxBody
	if r.ContentLength > limit {
		return nil, tooLarge(r.ContentLength, limit)
	}
	declared := r.ContentLength
	if r.Body == nil || r.Body == http.NoBody {
		declared = 0
	}
	if declared != 0 {
		p.cfg.Edge.BodyDeadline(w)
	}
	body, err := httpx.ReadBody(r.Body, declared, limit)
	if declared != 0 && err == nil {
		// Only then: after a failure the body deadline bounds what
		// net/http still reads of the body before it closes.
		httpx.LiftReadDeadline(w)
	}
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, httpx.ErrTooLarge):
		return nil, tooLarge(-1, limit)
	case isTimeout(err):
		return nil, &Error{Status: http.StatusRequestTimeout, Code: "body_timeout",
			Message: fmt.Sprintf("the request body was not received within %s (SERVE_BODY_TIMEOUT_S); send it faster or raise the limit", p.cfg.Edge.BodyTimeout), Cause: err}
	case r.Context().Err() != nil:
		return nil, errClientGone
	}
	return nil, &Error{Status: http.StatusBadRequest, Code: "unreadable_body",
		Message: fmt.Sprintf("could not read the request body: %v; send the whole body (Content-Length must match)", err), Cause: err}
}

// isTimeout reports whether err is an expired deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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

// fail is the one place a failed request is answered and logged.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, x *exchange, err error) {
	if p.cutAtStop(r) {
		p.failAtStop(w, r, x)
		return
	}
	if errors.Is(err, errClientGone) {
		x.ka.stop()
		x.code = StatusClientClosed
		p.log.Debug("proxy_client_gone", "model", x.model, "path", r.URL.Path, "elapsed", time.Since(x.start))
		// Nothing was served. Returning without a write would make
		// net/http answer 200 with an empty body, success for work that
		// was not done (to a client that half-closed but still reads):
		// cut the connection instead.
		panic(http.ErrAbortHandler)
	}
	e := asError(err)
	p.logFailure(x, r.URL.Path, e)
	if x.ka.stop() {
		// Comments committed a 200 event stream: the failure goes to the
		// client as an error event, and the stream ends without [DONE].
		x.code = e.Status
		p.cfg.Edge.WriteDeadline(w)
		writeErrorEvent(w, e)
		return
	}
	if x.headersOut {
		// The status line is out: the only honest signal left is to cut
		// the connection, so the client cannot take a truncated answer
		// for a complete one.
		panic(http.ErrAbortHandler)
	}
	switch e.Status {
	case http.StatusRequestEntityTooLarge, http.StatusRequestTimeout:
		// The rest of the body was not read; the connection cannot carry
		// another request.
		w.Header().Set("Connection", "close")
	}
	// The wait for the engine may have outlasted the request's first
	// write deadline, and answer lifted its own.
	p.cfg.Edge.WriteDeadline(w)
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
func (x *exchange) upstream() string { return x.target.Redacted() }

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
	// The replica's count first, so that the capacity flow control hands
	// on is there.
	x.ticket.End()
	x.adm.Done(float64(x.tokens))
	if x.code == 0 {
		x.code = http.StatusOK
	}
	if x.grant != nil {
		x.grant.Done(x.code)
	}
	mm := x.mm
	if mm == nil {
		mm = p.m.model(x.model)
	}
	mm.done(x.code)
}

// upstreamRequest builds the engine's request on the resolved URL
// directly, instead of printing it and parsing it back, with header h
// (buildUpstreamHeader). Its body is the client's bytes as read
// (httpx.Body.AttachContext: rewindable, so the transport can resend a
// request it never wrote on a stale pooled connection). The request is
// built on the stack: AttachContext's copy, which carries ctx, is the only
// one allocated.
func upstreamRequest(ctx context.Context, target *url.URL, body *httpx.Body, h http.Header) *http.Request {
	up := http.Request{
		Method: http.MethodPost, URL: target, Host: strings.TrimSuffix(target.Host, ":"),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
	}
	return body.AttachContext(ctx, &up)
}

var _ http.Handler = (*Proxy)(nil)
