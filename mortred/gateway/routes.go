package gateway

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The routes of the spec's table. Methods are checked in the handlers so that
// a wrong method answers the 405 envelope, not the mux's plain text.
func (g *Gateway) routes(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			g.auth(methodNotAllowed("GET")).ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	})
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.Handle("/metrics", g.bearer(g.cfg.MetricsToken, "metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			methodNotAllowed("GET").ServeHTTP(w, r)
			return
		}
		metricsHandler.ServeHTTP(w, r)
	})))
	mux.Handle("/stats.json", g.bearer(g.cfg.MetricsToken, "metrics", http.HandlerFunc(g.stats)))
	mux.HandleFunc("/readyz", g.readyz)
	mux.Handle("/v1/models/{id}/infer", g.auth(g.model(http.MethodPost, func(u *Upstream, r *http.Request) string { return u.URI }, notJob)))
	mux.Handle("/v1/models/{id}/jobs", g.auth(g.model(http.MethodPost, func(*Upstream, *http.Request) string { return "/jobs" }, jobState)))
	mux.Handle("/v1/models/{id}/jobs/{job}", g.auth(g.jobRoute("", jobState)))
	mux.Handle("/v1/models/{id}/jobs/{job}/wait", g.auth(g.jobRoute("/wait", jobState)))
	mux.Handle("/v1/models/{id}/jobs/{job}/result", g.auth(g.jobRoute("/result", jobResult)))
	mux.Handle("/", g.auth(http.HandlerFunc(g.legacy)))
	return mux
}

// model resolves {id} and forwards to the path upstreamPath returns ("":
// the path names no resource, 404).
func (g *Gateway) model(method string, upstreamPath func(*Upstream, *http.Request) string, answer jobAnswer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := g.byID[r.PathValue("id")]
		if u == nil {
			writeEnvelope(w, http.StatusNotFound, statusNotFound, "no model with catalog id "+quote(r.PathValue("id"))+"; GET the supervisor's /api/v1/catalog for the list", "")
			g.metrics.request("", http.StatusNotFound)
			return
		}
		var path string
		check := func() bool {
			if r.Method != method {
				methodNotAllowed(method).ServeHTTP(w, r)
				g.metrics.request(u.ID, http.StatusMethodNotAllowed)
				return false
			}
			if path = upstreamPath(u, r); path == "" {
				writeEnvelope(w, http.StatusNotFound, statusNotFound, "no job with id "+quote(r.PathValue("job"))+"; job ids are the ones POST /v1/models/{id}/jobs returned", "")
				g.metrics.request(u.ID, http.StatusNotFound)
				return false
			}
			return true
		}
		g.admitted(w, r, u, check, func(w http.ResponseWriter, gr *keys.Grant) {
			g.forward(w, r, u, path, answer, gr)
		})
	})
}

// legacy serves POST {server_uri}; anything else is the 404 envelope.
func (g *Gateway) legacy(w http.ResponseWriter, r *http.Request) {
	u := g.byURI[r.URL.Path]
	if u == nil {
		writeEnvelope(w, http.StatusNotFound, statusNotFound, "no route for "+quote(r.URL.Path)+"; use POST /v1/models/{id}/infer", "")
		g.metrics.request("", http.StatusNotFound)
		return
	}
	check := func() bool {
		if r.Method != http.MethodPost {
			methodNotAllowed(http.MethodPost).ServeHTTP(w, r)
			g.metrics.request(u.ID, http.StatusMethodNotAllowed)
			return false
		}
		return true
	}
	g.admitted(w, r, u, check, func(w http.ResponseWriter, gr *keys.Grant) {
		g.forward(w, r, u, u.URI, notJob, gr)
	})
}

// auth checks the external inference token, or with a key file the API
// key (the token is then the operator's key).
func (g *Gateway) auth(next http.Handler) http.Handler {
	if g.keys != nil {
		return g.keyAuth(next)
	}
	return g.bearer(g.cfg.Token, "inference", next)
}

func (g *Gateway) bearer(token, scope string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearerToken(r)
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="Mortred"`)
			msg := "missing or invalid Bearer token for inference: send Authorization: Bearer $" + EnvAPIToken +
				" (or $" + EnvGatewayToken + " when the gateway runs with it), as `mortredctl init-trust` wrote it"
			if scope == "metrics" {
				msg = "missing or invalid Bearer token for metrics: GET " + r.URL.Path + " takes Authorization: Bearer $" + EnvMetricsToken + ", not the inference token"
			}
			writeEnvelope(w, http.StatusUnauthorized, statusUnauthorized, msg, "")
			g.metrics.unauthorized.Inc()
			return
		}
		next.ServeHTTP(w, r)
	})
}

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

func methodNotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeEnvelope(w, http.StatusMethodNotAllowed, statusMethodNotAllowed, r.Method+" is not allowed here; use "+allow, "")
	})
}

func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return "'" + s + "'"
}
