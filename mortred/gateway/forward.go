package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// Headers a model server needs to see (canonical names); everything else
// stays at the edge, and so do these when the client's Connection header
// names them.
var forwardRequestHeaders = []string{"Content-Type", "Accept", "X-Request-Id"}

// maxJobAnswer bounds a job answer read into memory to rewrite its URLs.
const maxJobAnswer = 1 << 20

// maxSmallBody is the largest declared body read whole before it is
// forwarded; larger and undeclared ones stream through.
const maxSmallBody = 64 << 10

// jobAnswer says which model-server answers carry job ids and URLs that
// the gateway rewrites onto its own prefix (and host).
type jobAnswer uint8

const (
	// notJob: an inference answer, relayed as it is.
	notJob jobAnswer = iota
	// jobState: every answer (POST /jobs, a job's state, its wait).
	jobState
	// jobResult: GET .../result: the envelope of a done job passes as it
	// is; a refusal (409 with the job's state) is rewritten.
	jobResult
)

// rewrites reports whether an answer of this status is rewritten.
func (a jobAnswer) rewrites(status int) bool {
	return a == jobState || a == jobResult && status != http.StatusOK
}

// forward relays r to u's path on the model's active instance. gr is the
// request's API key grant (nil without keys): its tenant goes to the model
// server, and the images the answer counts are charged to it. A GET of a
// job (answer not notJob) that the active instance answers 404 is asked of
// the draining instances too (see fromDraining).
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, u *Upstream, path string, answer jobAnswer, gr *keys.Grant) {
	start := time.Now()
	st := g.up[u]
	if r.ContentLength > g.cfg.MaxBody {
		writeEnvelope(w, http.StatusRequestEntityTooLarge, statusTooLarge,
			fmt.Sprintf("request body of %d bytes is over the gateway's limit of %d bytes", r.ContentLength, g.cfg.MaxBody), "")
		st.request(http.StatusRequestEntityTooLarge)
		return
	}
	var body io.Reader = http.NoBody
	var in *eofReader
	var small *httpx.Body
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
			// Model servers read the body as JSON and decode no content
			// coding; passing the header would not make them, and
			// dropping it would hand them compressed bytes as JSON.
			g.refuse(w, st, http.StatusUnsupportedMediaType, statusUnsupported,
				fmt.Sprintf("request bodies with Content-Encoding %q are not supported; send the body uncompressed", ce))
			return
		}
		// The body must arrive within the edge's BodyTimeout; the deadline
		// is lifted at its end, before the model works.
		g.cfg.Edge.BodyDeadline(w)
		if r.ContentLength > 0 && r.ContentLength <= maxSmallBody {
			// A small body (an image thumbnail, the common case) is read
			// whole into a pooled buffer first: it is written from there,
			// with its head in one write when both fit the Transport's
			// write buffer, and a failed body read is answered before
			// anything went upstream.
			b, err := httpx.ReadBody(r.Body, r.ContentLength, g.cfg.MaxBody)
			if err != nil {
				// The body deadline stays: it bounds what net/http still
				// reads of the body before it closes.
				g.bodyError(w, r, u, err)
				return
			}
			httpx.LiftReadDeadline(w)
			defer b.Release()
			small = b
		} else {
			// Streams through: the limit is enforced while reading, so an
			// undeclared length is cut at the limit instead of buffered.
			in = &eofReader{r: http.MaxBytesReader(w, r.Body, g.cfg.MaxBody), done: func() { httpx.LiftReadDeadline(w) }}
			body = in
		}
	}
	// The route is loaded once: a reload while this request runs does not
	// move it.
	rt := st.route.Load()
	inst := &rt.active
	tenant := tenantOf(gr)
	resp, err := g.roundTrip(r, inst.addr, path, body, small, st, tenant)
	var be *buildError
	if errors.As(err, &be) {
		writeEnvelope(w, http.StatusBadGateway, statusServerError, "cannot build the upstream request: "+be.err.Error(), "")
		st.request(http.StatusBadGateway)
		return
	}
	if err != nil {
		in.abandon(w)
		g.upstreamError(w, r, u, inst.addr, in, err)
		return
	}
	if resp.StatusCode == http.StatusNotFound && len(rt.draining) > 0 && answer != notJob &&
		r.Method == http.MethodGet && body == http.NoBody && small == nil {
		resp, inst = g.fromDraining(r, u, path, st, tenant, rt, resp)
	}
	defer resp.Body.Close()

	h := w.Header()
	if gr != nil {
		// The key's headers, set at admission, not any a model server sent.
		keys.DropHeaders(resp.Header)
	}
	httpx.CopyResponseHeader(h, resp.Header)
	charge(h, r, gr)
	in.abandon(w)
	h["X-Mortred-Model"] = st.modelHeader
	if inst.versionHeader != nil {
		h[headerVersion] = inst.versionHeader
	}
	if g.hostHeader != nil {
		h[headerHost] = g.hostHeader
	}
	// The client has WriteTimeout from now to take the answer, or, for a
	// stream, each chunk.
	g.cfg.Edge.WriteDeadline(w)
	if answer.rewrites(resp.StatusCode) {
		g.writeJobAnswer(w, r, u, inst.addr, resp)
	} else {
		var flush func() error
		var dst io.Writer = w
		if needsFlush(resp) {
			// A failed flush shows in the next write.
			rc := http.NewResponseController(w)
			flush = func() error { _ = rc.Flush(); return nil }
			dst = g.cfg.Edge.StreamWriter(w)
		}
		w.WriteHeader(resp.StatusCode)
		if readErr, writeErr := httpx.Relay(dst, flush, resp.Body, nil, nil); writeErr != nil {
			g.abortMidResponse(r, u, fmt.Errorf("%w: %w", errClientWrite, writeErr))
		} else if readErr != nil {
			g.abortMidResponse(r, u, readErr)
		}
	}
	st.request(resp.StatusCode)
	st.observe(time.Since(start).Seconds())
}

// roundTrip sends the model server's request to addr through the
// Transport. Errors read as http.Client reports them, for the same log and
// 502 text. A small body read whole (small) is attached instead of body.
func (g *Gateway) roundTrip(r *http.Request, addr, path string, body io.Reader, small *httpx.Body, st *upstreamState, tenant string) (*http.Response, error) {
	out, err := upstreamRequest(r, addr, path, body)
	if err != nil {
		return nil, &buildError{err}
	}
	out.ContentLength = r.ContentLength
	upstreamHeader(out.Header, r, g.forwardedFor(r), st, tenant)
	if small != nil {
		out = small.Attach(out)
	}
	resp, err := httpx.RoundTrip(g.transport, out)
	if err != nil {
		return nil, &url.Error{Op: urlErrorOp(out.Method), URL: out.URL.String(), Err: err}
	}
	return resp, nil
}

// fromDraining asks rt's draining instances, in order, for the job that
// the active instance answered 404 for (notFound): the job may have been
// submitted before the rollout. The first answer that is not a 404 is
// relayed, with the instance that gave it; when every one answers 404 or
// cannot be reached (a stopped instance refuses), notFound is. Answers not
// relayed are drained and closed. Only GETs without a body come here, so
// sending one again is safe.
func (g *Gateway) fromDraining(r *http.Request, u *Upstream, path string, st *upstreamState, tenant string, rt *route, notFound *http.Response) (*http.Response, *instance) {
	for i := range rt.draining {
		d := &rt.draining[i]
		resp, err := g.roundTrip(r, d.addr, path, http.NoBody, nil, st, tenant)
		if err != nil {
			if r.Context().Err() != nil {
				break // the client is gone; relaying notFound finds out
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				g.log.Warn("gateway_draining_failed", "model", u.ID, "addr", d.addr, "err", err)
			}
			continue
		}
		if resp.StatusCode == http.StatusNotFound {
			discard(resp)
			continue
		}
		discard(notFound)
		return resp, d
	}
	return notFound, &rt.active
}

// maxDiscard bounds what is read of an answer that is not relayed, so that
// its connection can be reused; a longer one is closed instead.
const maxDiscard = 64 << 10

// discard drains and closes an answer that is not relayed.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDiscard))
	resp.Body.Close()
}

// refuse answers a request the gateway itself turns away.
func (g *Gateway) refuse(w http.ResponseWriter, st *upstreamState, code int, es envelope.Status, msg string) {
	writeEnvelope(w, code, es, msg, "")
	st.request(code)
}

// buildError is a model server request that could not be built (a path
// that is no URL), as against one that failed on the way.
type buildError struct{ err error }

func (e *buildError) Error() string { return e.err.Error() }

// upstreamHeader fills h (the model server's request's, empty) with what
// a model server sees of the client's header: the forwarded headers, the
// model's own Authorization, X-Forwarded-For (xff), and the tenant (an API
// key's id) when there is one. A client's own X-Mortred-Tenant is never
// among the forwarded headers: the model server trusts it for job tenancy.
func upstreamHeader(h http.Header, r *http.Request, xff string, st *upstreamState, tenant string) {
	httpx.ForwardHeader(h, r.Header, forwardRequestHeaders)
	if st.auth != nil {
		h["Authorization"] = st.auth
	}
	if xff != "" {
		h["X-Forwarded-For"] = []string{xff}
	}
	if tenant != "" {
		h[envelope.HeaderTenant] = []string{tenant}
	}
}

// upstreamRequest builds the model server's request on http://addr+path
// with the client's query. A plain path (the catalog's server_uri, a job
// id) becomes the URL directly; anything a URL parser would split or
// unescape takes the parser, as before, so both give the same URL.
func upstreamRequest(r *http.Request, addr, path string, body io.Reader) (*http.Request, error) {
	if !plainPath(path) {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+addr+path, body)
		if err == nil {
			out.URL.RawQuery = r.URL.RawQuery
		}
		return out, err
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "", body)
	if err != nil {
		return nil, err
	}
	// The URL the empty string parsed to, filled in: no second one.
	*out.URL = url.URL{Scheme: "http", Host: addr, Path: path, RawQuery: r.URL.RawQuery}
	out.Host = addr
	return out, nil
}

// plainPath reports whether path parses as itself: it starts with '/',
// and has only bytes a URL path keeps as they are.
func plainPath(path string) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '?' || c == '#' || c == '\\' {
			return false
		}
	}
	return true
}

// urlErrorOp is the Op http.Client puts in its errors: the method with
// only its first letter upper case ("Post").
func urlErrorOp(method string) string {
	if method == "" || len(method) == 1 {
		return method
	}
	return method[:1] + strings.ToLower(method[1:])
}

// needsFlush reports whether an answer is relayed chunk by chunk: an event
// stream, or one whose length is unknown (progressive output). A body of
// known length goes out through the response buffer like any other.
func needsFlush(resp *http.Response) bool {
	return resp.ContentLength < 0 || httpx.IsEventStream(resp.Header.Get("Content-Type"))
}

// forwardedFor is the X-Forwarded-For the model server sees. The model
// server rate-limits per client by the last entry when the request comes
// from loopback, so that entry must be the real client: the peer's address,
// unless the peer is itself a trusted proxy (the Nginx TLS edge on
// loopback, or a peer host's gateway forwarding a job request), whose own
// X-Forwarded-For is then kept as it is.
func (g *Gateway) forwardedFor(r *http.Request) string {
	return forwardedFor(r, g.trustedProxy)
}

func forwardedFor(r *http.Request, trusted func(netip.Addr) bool) string {
	vv := r.Header["X-Forwarded-For"]
	if len(vv) > 0 && httpx.NamedInConnection(r.Header, "X-Forwarded-For") {
		vv = nil // the client made it hop-by-hop
	}
	var prior string
	switch len(vv) {
	case 0:
	case 1:
		prior = vv[0]
	default:
		prior = strings.Join(vv, ", ")
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return prior
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() == "" && trusted(ip.Unmap()) && prior != "" {
		return prior
	}
	if prior == "" {
		return host
	}
	return prior + ", " + host
}

// errClientWrite marks a copy that failed writing to the client.
var errClientWrite = errors.New("writing to the client failed")

// upstreamError classifies a failure before any response byte was sent;
// addr is the model server's address the request went to.
func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, u *Upstream, addr string, in *eofReader, err error) {
	// The wait for the model may have outlasted the request's first
	// write deadline.
	g.cfg.Edge.WriteDeadline(w)
	var tooLarge *http.MaxBytesError
	switch {
	case in.timedOut():
		// The body did not arrive in time (net/http then also ends the
		// request's context, so this comes before the hang-up case).
		g.bodyTimeout(w, u)
	case r.Context().Err() == nil && in.failed() && !errors.As(err, &tooLarge) && !errors.As(in.readErr(), &tooLarge):
		// The client's (chunked) body was malformed: its fault, not the
		// model server's.
		w.Header().Set("Connection", "close")
		writeEnvelope(w, http.StatusBadRequest, statusInvalid,
			fmt.Sprintf("could not read the request body: %v; send a well-formed body", trimErr(in.readErr())), "")
		g.metrics.request(u.ID, http.StatusBadRequest)
	case r.Context().Err() != nil:
		// The client hung up: not the model's fault and not a 502. Nothing
		// was served; returning without a write would make net/http
		// answer 200 with an empty body (to a client that half-closed
		// but still reads), so the connection is cut instead.
		g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
		panic(http.ErrAbortHandler)
	case errors.As(err, &tooLarge):
		writeEnvelope(w, http.StatusRequestEntityTooLarge, statusTooLarge,
			fmt.Sprintf("request body is over the gateway's limit of %d bytes", tooLarge.Limit), "")
		g.metrics.request(u.ID, http.StatusRequestEntityTooLarge)
	case errors.Is(err, syscall.ECONNREFUSED):
		w.Header().Set("Retry-After", "1")
		writeEnvelope(w, http.StatusServiceUnavailable, statusNotReady,
			refusedMessage(u, addr), "")
		g.metrics.upstreamErrors.WithLabelValues(u.ID, "refused").Inc()
		g.metrics.request(u.ID, http.StatusServiceUnavailable)
	default:
		g.log.Warn("gateway_upstream_failed", "model", u.ID, "addr", addr, "err", err)
		writeEnvelope(w, http.StatusBadGateway, statusServerError,
			fmt.Sprintf("model %s at %s failed before answering: %v", u.ID, addr, trimErr(err)), "")
		g.metrics.upstreamErrors.WithLabelValues(u.ID, "transport").Inc()
		g.metrics.request(u.ID, http.StatusBadGateway)
	}
}

// abortMidResponse ends a response whose headers are already out. Aborting
// the handler makes the client see a broken response rather than a short
// one that looks complete.
func (g *Gateway) abortMidResponse(r *http.Request, u *Upstream, err error) {
	if r.Context().Err() != nil {
		g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
	} else {
		g.log.Warn("gateway_upstream_broke_mid_response", "model", u.ID, "err", err)
		g.metrics.upstreamErrors.WithLabelValues(u.ID, "mid_response").Inc()
	}
	panic(http.ErrAbortHandler)
}

// writeJobAnswer rewrites Location, poll_url and result_url from the model
// port's /jobs/ID... onto /v1/models/{id}/jobs/HOST.ID..., and job_id onto
// HOST.ID (without a host id, ID stays as it is), keeping every other byte.
// addr is the model server's address that answered.
func (g *Gateway) writeJobAnswer(w http.ResponseWriter, r *http.Request, u *Upstream, addr string, resp *http.Response) {
	rw := jobRewrite{prefix: "/v1/models/" + u.ID, host: g.cfg.HostID}
	if loc := resp.Header.Get("Location"); strings.HasPrefix(loc, "/jobs/") {
		w.Header().Set("Location", rw.url(loc))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJobAnswer+1))
	if err != nil {
		g.abortOrFail(w, r, u, addr, err)
		return
	}
	if len(data) > maxJobAnswer {
		// No job answer is this long; a model server sending one is
		// broken, and a cut answer must not pass as whole.
		g.abortMidResponse(r, u, fmt.Errorf("job answer over %d bytes", maxJobAnswer))
		return
	}
	data = rw.apply(data)
	w.Header().Del("Content-Length")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(data)
}

func (g *Gateway) abortOrFail(w http.ResponseWriter, r *http.Request, u *Upstream, addr string, err error) {
	for k := range w.Header() {
		w.Header().Del(k)
	}
	g.upstreamError(w, r, u, addr, nil, err)
}

// bodyError answers a small body that could not be read whole: too slow
// (408), the client gone (the connection is cut), or cut short (400).
func (g *Gateway) bodyError(w http.ResponseWriter, r *http.Request, u *Upstream, err error) {
	switch {
	case isTimeout(err):
		g.bodyTimeout(w, u)
	case r.Context().Err() != nil:
		g.metrics.clientClosed.WithLabelValues(u.ID).Inc()
		panic(http.ErrAbortHandler)
	default:
		w.Header().Set("Connection", "close")
		writeEnvelope(w, http.StatusBadRequest, statusInvalid,
			fmt.Sprintf("could not read the request body: %v; send the whole body (Content-Length must match)", err), "")
		g.metrics.request(u.ID, http.StatusBadRequest)
	}
}

// bodyTimeout is the answer to a body not received within BodyTimeout.
func (g *Gateway) bodyTimeout(w http.ResponseWriter, u *Upstream) {
	w.Header().Set("Connection", "close")
	writeEnvelope(w, http.StatusRequestTimeout, statusInvalid,
		fmt.Sprintf("the request body was not received within %s ([gateway] body_timeout_ms); send it faster", g.cfg.Edge.BodyTimeout), "")
	g.metrics.request(u.ID, http.StatusRequestTimeout)
}

// isTimeout reports whether err is an expired deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// jobRewrite puts a model server's job ids and URLs onto the gateway's
// prefix and host.
type jobRewrite struct {
	prefix string // /v1/models/{id}
	host   string // "" without a host id
}

// id is the job id a client sees.
func (rw jobRewrite) id(id string) string {
	if rw.host == "" {
		return id
	}
	return rw.host + "." + id
}

// url maps /jobs/ID[/more] onto prefix/jobs/HOST.ID[/more].
func (rw jobRewrite) url(u string) string {
	rest := strings.TrimPrefix(u, "/jobs/")
	if rw.host == "" || rest == "" {
		return rw.prefix + u
	}
	return rw.prefix + "/jobs/" + rw.id(rest)
}

// apply rewrites poll_url, result_url and job_id in a JSON object; anything
// that is not such an object is returned unchanged.
func (rw jobRewrite) apply(data []byte) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return data
	}
	changed := false
	for _, key := range []string{"poll_url", "result_url", "job_id"} {
		var s string
		raw, ok := obj[key]
		if !ok || json.Unmarshal(raw, &s) != nil {
			continue
		}
		switch {
		case key == "job_id" && rw.host != "" && s != "":
			obj[key], _ = json.Marshal(rw.id(s))
		case key != "job_id" && strings.HasPrefix(s, "/jobs/"):
			obj[key], _ = json.Marshal(rw.url(s))
		default:
			continue
		}
		changed = true
	}
	if !changed {
		return data
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return data
	}
	if bytes.HasSuffix(data, []byte("\n")) {
		out = append(out, '\n')
	}
	return out
}

func trimErr(err error) string {
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// eofReader notes when the client's body has been read to its end. It is
// read by the transport's goroutine and checked by the handler's.
type eofReader struct {
	r io.Reader
	// done runs at the body's end (it lifts the body's read deadline).
	done func()
	eof  atomic.Bool
	// timeout is set when a read of the client's body hit its deadline.
	timeout atomic.Bool
	// err is the first error reading the client's body (not EOF).
	err atomic.Pointer[error]
	// mu is held by Read, so abandon can wait out a read in progress.
	mu        sync.Mutex
	abandoned bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.abandoned {
		return 0, errBodyAbandoned
	}
	n, err := e.r.Read(p)
	switch {
	case err == io.EOF:
		if !e.eof.Swap(true) && e.done != nil {
			e.done()
		}
	case err != nil:
		e.err.CompareAndSwap(nil, &err)
		if isTimeout(err) {
			e.timeout.Store(true)
		}
	}
	return n, err
}

// failed reports whether reading the client's body failed.
func (e *eofReader) failed() bool { return e != nil && e.err.Load() != nil }

// readErr is the first error reading the client's body, nil if none.
func (e *eofReader) readErr() error {
	if p := e.err.Load(); p != nil {
		return *p
	}
	return nil
}

// timedOut reports whether reading the client's body hit its deadline.
func (e *eofReader) timedOut() bool { return e != nil && e.timeout.Load() }

var errBodyAbandoned = errors.New("the model server answered before the request body ended")

// abandon runs once the model server has answered or failed. If the
// client has not sent its whole body by then (the model's request deadline
// cut a client trickling it, or the model refused it early), nothing will
// read the rest: net/http would otherwise read it before sending the
// answer, at whatever pace the client chooses. An expired read deadline
// makes that read fail at once, so the answer goes out and the connection
// closes.
//
// abandon also waits for a read the transport still has in progress (the
// expired deadline ends it at once): net/http, finding a read in progress
// when the handler returns, would wait for it and then clear the read
// deadline, and its final read of the unread body would block at the
// client's pace again.
func (e *eofReader) abandon(w http.ResponseWriter) {
	if e == nil || e.eof.Load() {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	w.Header().Set("Connection", "close")
	e.mu.Lock()
	e.abandoned = true
	e.mu.Unlock()
}

// refusedMessage answers a request whose model server refused the
// connection at addr: nothing listens on its port, so it is stopped,
// starting or crashed, and mortredctl status tells which (and, for a
// crash, why).
func refusedMessage(u *Upstream, addr string) string {
	return fmt.Sprintf("model %s is not running (connection refused at %s): `mortredctl status` shows whether it is starting, stopped or crashed and why; `mortredctl start %s` starts a stopped one; retry after Retry-After", u.ID, addr, u.ID)
}
