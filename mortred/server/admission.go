package server

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// route is what a path names, decided before any check so that an unknown
// path is always the 404 envelope.
type route int

const (
	routeNone route = iota
	routeInfer
	routeMetrics
	routeSubmit
	routeJob
	routeJobWait
	routeJobResult
)

func (s *Server) match(path string) (route, string) {
	switch path {
	case s.cfg.ServerURI:
		return routeInfer, ""
	case "/metrics":
		return routeMetrics, ""
	}
	if s.jobs == nil {
		return routeNone, ""
	}
	if path == "/jobs" {
		return routeSubmit, ""
	}
	rest, ok := strings.CutPrefix(path, "/jobs/")
	if !ok || rest == "" {
		return routeNone, ""
	}
	id, sub, _ := strings.Cut(rest, "/")
	if id == "" {
		return routeNone, ""
	}
	switch sub {
	case "":
		if !strings.Contains(rest, "/") {
			return routeJob, id
		}
	case "wait":
		return routeJobWait, id
	case "result":
		return routeJobResult, id
	}
	return routeNone, ""
}

func (s *Server) routes() http.Handler {
	metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		arrival := time.Now()
		w := &httpx.StatusWriter{ResponseWriter: rw}
		defer func() {
			if w.Code != 0 {
				s.m.request(r.Method, w.Code, msSince(arrival))
			}
		}()
		s.serve(w, r, arrival, metrics)
	})
}

// serve is the admission chain, in the order of mortred.txt.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, arrival time.Time, metrics http.Handler) {
	// 1. Public routes: never authenticated, never rate-limited.
	switch r.URL.Path {
	case "/healthz", "/ready", "/openapi.json":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			reject(w, envelope.StatusMethodNotAllowed, taskID("", r), arrival, r.URL.Path+" answers GET only")
			return
		}
		s.public(w, r)
		return
	}
	rt, jobID := s.match(r.URL.Path)
	if rt == routeNone {
		msg := fmt.Sprintf("no route %s; inference is POST %s", r.URL.Path, s.cfg.ServerURI)
		if strings.HasPrefix(r.URL.Path, "/jobs") {
			msg = "async jobs are off on this server (async_enabled = false); POST " + s.cfg.ServerURI + " instead"
		}
		reject(w, envelope.StatusNotFound, taskID("", r), arrival, msg)
		return
	}
	// 2. Bearer auth, before the rate limiter: unauthenticated traffic does
	// not spend a client's budget.
	if !s.auth.allow(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="Mortred"`)
		msg := "missing or invalid Bearer token: send Authorization: Bearer $MORTRED_AUTH_TOKEN (this server's auth_token, or the MORTRED_AUTH_TOKEN it was started with); clients of a deployment go through the gateway with $MORTRED_API_TOKEN"
		if s.auth.empty {
			msg = "this server has no auth_token configured, so inference and /metrics are closed: set auth_token or MORTRED_AUTH_TOKEN"
		}
		reject(w, envelope.StatusUnauthorized, taskID("", r), arrival, msg)
		return
	}
	// 3. Per-client-IP rate limit.
	if ok, retry := s.limit.allow(clientIP(r)); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		reject(w, envelope.StatusRateLimited, taskID("", r), arrival, fmt.Sprintf("rate limit of %g requests/s per client exceeded; retry after %d s", s.cfg.RateLimitQPS, retry))
		return
	}
	// 4. Method.
	want := http.MethodGet
	if rt == routeInfer || rt == routeSubmit {
		want = http.MethodPost
	}
	if r.Method != want {
		w.Header().Set("Allow", want)
		reject(w, envelope.StatusMethodNotAllowed, taskID("", r), arrival, fmt.Sprintf("%s answers %s only", r.URL.Path, want))
		return
	}
	switch rt {
	case routeMetrics:
		metrics.ServeHTTP(w, r)
	case routeJob:
		s.getJob(w, r, jobID, arrival)
	case routeJobWait:
		s.waitJob(w, r, jobID, arrival)
	case routeJobResult:
		s.jobResult(w, r, jobID, arrival)
	default:
		s.admit(w, r, arrival, rt == routeSubmit)
	}
}

func (s *Server) public(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		writeJSON(w, http.StatusOK, taskID("", r), envelope.Probe{OK: true, Ready: s.Ready(), Model: s.modelName()})
	case "/ready":
		code := http.StatusOK
		if !s.Ready() {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, taskID("", r), envelope.Probe{OK: true, Ready: s.Ready(), Model: s.modelName()})
	case "/openapi.json":
		h := w.Header()
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.Itoa(len(OpenAPIDocument)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(OpenAPIDocument)
		}
	}
}

func (s *Server) modelName() string {
	if p := s.modelInf.Load(); p != nil {
		return p.Name
	}
	return ""
}

// admit runs the body checks (readiness, media type, size, envelope) and
// then the request itself, synchronously or as a job.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, arrival time.Time, async bool) {
	if !s.Ready() {
		w.Header().Set("Retry-After", "1")
		reject(w, envelope.StatusNotReady, taskID("", r), arrival, fmt.Sprintf("model %s is still loading: retry after Retry-After; it is loaded when GET /ready on this server answers 200 (`mortredctl status` shows READY yes)", s.cfg.ID))
		return
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		reject(w, envelope.StatusUnsupportedMedia, taskID("", r), arrival, fmt.Sprintf("Content-Type %q is not accepted: send application/json", r.Header.Get("Content-Type")))
		return
	}
	limit := s.cfg.SizeLimitBytes()
	tooLarge := fmt.Sprintf("request body over request_size_limit (%d MB): send fewer or smaller images", s.cfg.RequestSizeLimit)
	if r.ContentLength > limit {
		reject(w, envelope.StatusTooLarge, taskID("", r), arrival, tooLarge)
		return
	}
	// The body must arrive within the request deadline. The HTTP server
	// has no whole-request read timeout (it would also cut long answers),
	// so without this a client trickling its body holds the connection
	// for ever.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(arrival.Add(s.cfg.RunTimeout()))
	buf := getBody(r.ContentLength)
	defer putBody(buf)
	body, err := readBody(http.MaxBytesReader(w, r.Body, limit), buf)
	if err != nil {
		// The deadline stays: the server's discard of the unread rest then
		// fails at once and the connection closes.
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			reject(w, envelope.StatusTooLarge, taskID("", r), arrival, tooLarge)
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			reject(w, envelope.StatusJSONDecode, taskID("", r), arrival, fmt.Sprintf(
				"the request body did not arrive within model_run_timeout (%d ms); send the whole body at once", s.cfg.ModelRunTimeout))
		default:
			reject(w, envelope.StatusJSONDecode, taskID("", r), arrival, "reading the request body failed: "+err.Error())
		}
		return
	}
	// Lifted once the body is in: the server's background read during
	// inference must not hit it and cancel the request's context.
	_ = rc.SetReadDeadline(time.Time{})
	// Parse keeps no reference to body, so its buffer goes back to the pool
	// when admit returns.
	p, rerr := envelope.Parse(body, envelope.Limits{MaxItems: s.cfg.MaxRequestItems, Params: s.models[0].ValidateParams})
	if rerr != nil {
		resp := envelope.New(rerr.Status, taskID("", r), rerr.Errors...)
		resp.ServerTimeMS = envelope.MS(time.Since(arrival).Nanoseconds())
		writeEnvelope(w, resp)
		return
	}
	id := taskID(p.ReqID, r)
	// Counted now: the request's images are released once it ran.
	items := strconv.Itoa(len(p.Data))
	if async {
		s.submitJob(w, r, p, id, arrival, items)
		return
	}
	resp, err := s.infer(r.Context(), p, id, arrival, arrival.Add(s.cfg.RunTimeout()), false, nil)
	var full *errQueueFull
	switch {
	case errors.As(err, &full):
		w.Header().Set("Retry-After", strconv.Itoa(full.retry))
		reject(w, envelope.StatusRateLimited, id, arrival, fmt.Sprintf("the model queue is full (max_queue_depth %d); retry after %d s", s.cfg.QueueDepth(), full.retry))
	case resp == nil:
		// The client hung up; nobody reads an answer.
	default:
		// The model took the request (200, or 504 when its deadline cut
		// every item): the gateway charges its images to the API key. An
		// answer that failed every item before the model (status 3, the
		// shutdown's 65) counts none.
		if c := envelope.HTTPCode(resp.Status); c == http.StatusOK || c == http.StatusGatewayTimeout {
			w.Header().Set(envelope.HeaderItems, items)
		}
		writeEnvelope(w, resp)
	}
}
