package gateway

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mortred/config"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// This file is the gateway's side of the API keys (internal/keys): who
// the client is, whether the model is in its key's scope, the key's limits,
// what the answer cost, and which tenant a job belongs to. Without a key
// file none of it runs.

// keyAuth authenticates the request's API key (or the operator's token)
// and carries the key in the request's context for the route.
func (g *Gateway) keyAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, rej := g.keys.Authenticate(r.Header, clientAddr(r, g.trustedProxy))
		if rej != nil {
			g.keyRefusal(w, rej)
			g.metrics.unauthorized.Inc()
			return
		}
		next.ServeHTTP(w, r.WithContext(keys.NewContext(r.Context(), k)))
	})
}

// keyRefusal answers a refusal of the key store in the mortred envelope,
// with its headers (WWW-Authenticate; Retry-After, retry-after-ms and the
// x-ratelimit-* of a 429).
func (g *Gateway) keyRefusal(w http.ResponseWriter, rej *keys.Rejection) {
	rej.SetHeaders(w.Header())
	st := envelope.StatusRateLimited
	switch rej.Status {
	case http.StatusUnauthorized:
		st = statusUnauthorized
		if w.Header().Get("WWW-Authenticate") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="Mortred"`)
		}
	case http.StatusForbidden:
		st = envelope.StatusForbidden
	}
	writeEnvelope(w, rej.Status, st, rej.Message, "")
}

// clientAddr is the client's address as the model servers' per-IP limit
// sees it: the last entry of the X-Forwarded-For the gateway sends, which
// is the peer, or the real client a loopback proxy (the TLS edge) named.
// An entry that is no address falls back to the peer.
func clientAddr(r *http.Request, trusted func(netip.Addr) bool) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	xff := forwardedFor(r, trusted)
	last := strings.TrimSpace(xff[strings.LastIndexByte(xff, ',')+1:])
	if ip, err := netip.ParseAddr(last); err == nil {
		return ip.WithZone("").Unmap().String()
	}
	return host
}

// admitted runs serve for a request to model u under the request's key:
// the model must be in the key's scope (403), the key must have budget
// (429), and the answer's status ends the grant (499 when the client went
// away). Without keys serve runs with a nil grant. check runs between
// scope and limits and refuses what never reaches a model (a wrong method,
// a bad job id) without spending the key's budget; it returns false when
// it answered.
func (g *Gateway) admitted(w http.ResponseWriter, r *http.Request, u *Upstream, check func() bool, serve func(http.ResponseWriter, *keys.Grant)) {
	k := keys.FromContext(r.Context())
	if k == nil {
		if check() {
			serve(w, nil)
		}
		return
	}
	st := g.up[u]
	if rej := k.Scope(u.ID); rej != nil {
		g.keyRefusal(w, rej)
		st.request(rej.Status)
		return
	}
	if !check() {
		return
	}
	grant, rej := k.Admit()
	if rej != nil {
		g.keyRefusal(w, rej)
		st.request(rej.Status)
		return
	}
	rec := &httpx.StatusWriter{ResponseWriter: w}
	finished := false
	defer func() {
		// Also runs while forward aborts the handler (panic
		// http.ErrAbortHandler), which then goes on.
		grant.Done(doneStatus(rec.Code, finished, r.Context().Err() != nil))
	}()
	grant.SetHeaders(w.Header())
	serve(rec, grant)
	finished = true
}

// doneStatus is the status a grant ends with: 499 when the client went
// away, 502 when the answer was cut after it began (the model server
// broke mid-answer), else what the client got.
func doneStatus(code int, finished, clientGone bool) int {
	switch {
	case clientGone:
		return 499
	case !finished:
		return http.StatusBadGateway
	case code == 0:
		return http.StatusOK
	}
	return code
}

// tenantOf is the X-Mortred-Tenant the model server gets for a grant: the
// key's id, none for the operator (who reads every job) and without keys.
func tenantOf(gr *keys.Grant) string {
	if gr == nil {
		return ""
	}
	if id := gr.Key().ID; id != keys.OperatorID {
		return id
	}
	return ""
}

// answerItems removes the model server's accounting headers from the
// answer h the client will get and returns the images to charge: the
// X-Mortred-Items of one well-formed value (decimal digits, at most
// config.MaxRequestItemsCap), else 0. A model server's X-Mortred-Tenant is
// dropped too: tenancy is the gateway's to say.
func answerItems(h http.Header) int64 {
	vv := h[envelope.HeaderItems]
	delete(h, envelope.HeaderItems)
	delete(h, envelope.HeaderTenant)
	if len(vv) != 1 {
		return 0
	}
	n, err := strconv.ParseUint(vv[0], 10, 32)
	if err != nil || n > config.MaxRequestItemsCap {
		return 0
	}
	return int64(n)
}

// charge accounts a model server's answer: its accounting headers leave
// h, and a submission's images are charged to the grant.
func charge(h http.Header, r *http.Request, gr *keys.Grant) {
	n := answerItems(h)
	if gr == nil {
		return
	}
	if n > 0 && r.Method == http.MethodPost {
		gr.Charge(keys.Charge{Images: n})
	}
}

// stats is GET /stats.json: every key's usage and the 15-minute series,
// for the supervisor's page. Keys off: no keys and an empty series.
// ?since=MS (unix ms) limits the series to samples after it.
func (g *Gateway) stats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed("GET").ServeHTTP(w, r)
		return
	}
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeEnvelope(w, http.StatusUnprocessableEntity, envelope.StatusInvalidRequest, "query since="+quote(v)+" must be a unix time in milliseconds", "")
			return
		}
		since = n
	}
	doc := struct {
		Keys   []keys.Usage        `json:"keys"`
		Series keys.SeriesSnapshot `json:"series"`
	}{Keys: []keys.Usage{}}
	if g.keys != nil {
		if u := g.keys.Usage(); u != nil {
			doc.Keys = u
		}
		doc.Series = g.keys.Series(since)
	}
	if doc.Series.Times == nil {
		doc.Series.Times = []int64{}
	}
	if doc.Series.Keys == nil {
		doc.Series.Keys = map[string]keys.KeySeries{}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		writeEnvelope(w, http.StatusInternalServerError, statusServerError, "encoding the usage failed: "+err.Error(), "")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(append(b, '\n'))
}
