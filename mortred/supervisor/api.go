package supervisor

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServerStatus is one process in /api/v1/status and /api/v1/servers/{id}.
type ServerStatus struct {
	ID string `json:"id"`
	Status
	Enabled  bool   `json:"enabled"`
	URI      string `json:"uri,omitempty"`
	Port     int    `json:"port,omitempty"`
	Category string `json:"category,omitempty"`
	Name     string `json:"name,omitempty"`
	// Version is the model config's version of the instance in service;
	// Instance counts its rollouts (0: the catalog's).
	Version  string `json:"version,omitempty"`
	Instance int    `json:"instance"`
	// Draining are replaced versions still finishing their work.
	Draining []DrainingStatus `json:"draining,omitempty"`
	// Rollout is the last rollout or rollback, absent before the first.
	Rollout *RolloutState `json:"rollout,omitempty"`
}

// CatalogEntry is one row of /api/v1/catalog.
type CatalogEntry struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Category string `json:"category"`
	URI      string `json:"uri"`
	Port     int    `json:"port"`
}

// Log paging bounds of the API.
const (
	defaultLogLimit = 200
	maxLogLimit     = 1000
)

// Handler serves the management REST API under /api/v1/ and, when ui is
// non-nil, the web UI at /.
func (m *Manager) Handler(ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	api := http.NewServeMux()
	api.HandleFunc("GET /api/v1/catalog", m.catalog)
	api.HandleFunc("GET /api/v1/status", m.status)
	api.HandleFunc("GET /api/v1/servers/{id}", m.server)
	api.HandleFunc("POST /api/v1/servers/{id}/{action}", m.action)
	api.HandleFunc("GET /api/v1/servers/{id}/logs", m.logs)
	api.HandleFunc("GET /api/v1/series", m.series)
	api.HandleFunc("GET /api/v1/usage", m.usage)
	api.Handle("GET /api/v1/metrics", promhttp.HandlerFor(m.registry(), promhttp.HandlerOpts{}))
	api.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, apiError{Error: "no such API route: " + r.Method + " " + r.URL.Path})
	})
	mux.Handle("/api/v1/", m.auth(api))
	// The UI's smoke test goes through the gateway, which checks the token
	// itself; relaying it from this origin keeps the page free of CORS.
	mux.Handle("POST /gateway/v1/models/{id}/infer", m.relayToGateway())
	if ui != nil {
		mux.Handle("/", ui)
	}
	return mux
}

type apiError struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

func (m *Manager) auth(next http.Handler) http.Handler {
	want := []byte(m.apiTok)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme is case-insensitive (RFC 9110 11.1), as on the gateway.
		h := r.Header.Get("Authorization")
		ok := len(h) > len("Bearer ") && strings.EqualFold(h[:len("Bearer ")], "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[len("Bearer "):])), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="Mortred"`)
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "missing or invalid Bearer token: send Authorization: Bearer $MORTRED_API_TOKEN"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (m *Manager) catalog(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Servers []CatalogEntry `json:"servers"`
	}{Servers: []CatalogEntry{}}
	for _, x := range m.Servers() {
		out.Servers = append(out.Servers, CatalogEntry{ID: x.ID, Name: x.Name, Category: x.Category, URI: x.URI, Port: x.Port})
	}
	writeJSON(w, http.StatusOK, out)
}

func (m *Manager) statusOf(x *Managed) ServerStatus {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := ServerStatus{ID: x.ID, Status: x.cur.child.Status(), Enabled: x.Enabled, URI: x.URI, Port: x.cur.port, Category: x.Category, Name: x.Name,
		Version: x.cur.version, Instance: x.cur.gen}
	for _, d := range x.draining {
		st.Draining = append(st.Draining, DrainingStatus{Version: d.version, Instance: d.gen, Port: d.port, PID: d.child.Status().PID})
	}
	if x.roll.State != "" {
		r := x.roll
		st.Rollout = &r
	}
	return st
}

func (m *Manager) status(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Gateway ServerStatus   `json:"gateway"`
		Servers []ServerStatus `json:"servers"`
	}{Gateway: m.statusOf(m.byID[GatewayID]), Servers: []ServerStatus{}}
	for _, x := range m.Servers() {
		out.Servers = append(out.Servers, m.statusOf(x))
	}
	writeJSON(w, http.StatusOK, out)
}

func (m *Manager) lookup(w http.ResponseWriter, r *http.Request) *Managed {
	x := m.byID[r.PathValue("id")]
	if x == nil {
		writeJSON(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no server %q; GET /api/v1/catalog lists them", r.PathValue("id"))})
	}
	return x
}

func (m *Manager) server(w http.ResponseWriter, r *http.Request) {
	if x := m.lookup(w, r); x != nil {
		writeJSON(w, http.StatusOK, m.statusOf(x))
	}
}

func (m *Manager) action(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	switch action {
	case "start", "stop", "restart", "graceful_restart":
	case "rollout", "rollback":
		m.rollout(w, r, action)
		return
	default:
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("%s: %q", ErrUnknownAction, action)})
		return
	}
	x := m.lookup(w, r)
	if x == nil {
		return
	}
	// The action outlives a client that hangs up: a half-done restart is
	// worse than a finished one nobody reads.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.opts.GracefulWait+time.Minute)
	defer cancel()
	if err := m.Act(ctx, x.ID, action); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, ErrUnknownAction) {
			code = http.StatusBadRequest
		}
		writeJSON(w, code, apiError{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (m *Manager) logs(w http.ResponseWriter, r *http.Request) {
	x := m.lookup(w, r)
	if x == nil {
		return
	}
	q := r.URL.Query()
	offset, err := queryInt(q.Get("offset"), 0)
	if err != nil || offset < 0 {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "offset must be a non-negative integer"})
		return
	}
	limit, err := queryInt(q.Get("limit"), defaultLogLimit)
	if err != nil || limit < 1 {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("limit must be an integer from 1 to %d", maxLogLimit)})
		return
	}
	limit = min(limit, maxLogLimit)
	lines, first, total := x.Child().Log().Page(int64(offset), int(limit))
	writeJSON(w, http.StatusOK, struct {
		Offset int64    `json:"offset"`
		Total  int64    `json:"total"`
		Lines  []string `json:"lines"`
	}{first, total, lines})
}

func queryInt(s string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"ok":false,"error":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func (m *Manager) relayToGateway() http.Handler {
	target, _ := url.Parse(m.gatewayURL)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, "/gateway")
			pr.Out.URL.RawPath = ""
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, apiError{Error: "the gateway did not answer (" + err.Error() + "); is it running? See /api/v1/status"})
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request body streams through to the gateway. Without full
		// duplex, net/http closes it once the answer's head is written,
		// and a gateway that answers before the transport has finished
		// with the body (its own head, or an early error) makes the
		// relay cut the connection under the answer (golang/go#15527).
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}

// registry exports the supervisor's gauges, read at scrape time.
func (m *Manager) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&stateCollector{m: m}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

var (
	descState    = prometheus.NewDesc("mortred_supervisor_state", "Lifecycle state: 0 stopped, 1 starting, 2 running, 3 backoff, 4 failed.", []string{"server"}, nil)
	descReady    = prometheus.NewDesc("mortred_supervisor_ready", "1 when the process answers its readiness probe.", []string{"server"}, nil)
	descRestarts = prometheus.NewDesc("mortred_supervisor_restarts_total", "Automatic restarts after a crash.", []string{"server"}, nil)
)

var stateValue = map[State]float64{StateStopped: 0, StateStarting: 1, StateRunning: 2, StateBackoff: 3, StateFailed: 4}

type stateCollector struct{ m *Manager }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descState
	ch <- descReady
	ch <- descRestarts
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, id := range c.m.order {
		s := c.m.byID[id].Child().Status()
		ready := 0.0
		if s.Ready {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, stateValue[s.State], id)
		ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready, id)
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(s.RestartCount), id)
	}
}

// maxRolloutBody bounds a rollout request's JSON.
const maxRolloutBody = 64 << 10

// rollout serves POST /api/v1/servers/{id}/rollout and .../rollback: 200
// with the result once the new version serves; 400 for a bad request, 404
// for an unknown id, 409 while another rollout of it runs (or, for a
// rollback, with nothing to return to), 422 when the new version did not
// start or failed warm-up (the old one serves on), 500 otherwise. The body
// is {"ok":false,"error":...} on every failure.
func (m *Manager) rollout(w http.ResponseWriter, r *http.Request, action string) {
	var req RolloutRequest
	if action == "rollout" && r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRolloutBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, http.StatusBadRequest, apiError{Error: "rollout body: " + err.Error() + `; send {"model_file":PATH} or {"config":PATH}, and optionally "version"`})
			return
		}
	}
	// Like the other actions, it outlives a client that hangs up.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Minute)
	defer cancel()
	var res RolloutResult
	var err error
	if action == "rollout" {
		res, err = m.Rollout(ctx, r.PathValue("id"), req)
	} else {
		res, err = m.Rollback(ctx, r.PathValue("id"))
	}
	if err != nil {
		code := http.StatusInternalServerError
		var re *RolloutError
		if errors.As(err, &re) {
			code = re.Code
		}
		writeJSON(w, code, apiError{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}
