// Package auth is the router's front door with keys on (SERVE_KEYS_FILE):
// every request but the few open pages must carry a key of the key store,
// which is put in the request's context for the handlers behind (the
// proxy's scope and limits, /v1/models, token counting, MCP).
package auth

import (
	"net"
	"net/http"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/mentat/serve/proxy"
)

// Authenticator checks a request's Authorization header for client
// address addr (keys.Store.Authenticate).
type Authenticator interface {
	Authenticate(header http.Header, addr string) (*keys.Key, *keys.Rejection)
}

// open are the paths served without a key, to GET and HEAD only: the
// status page and documents, the metrics and the health checks. They show
// key ids and usage, never a secret; like the rest of the control surface
// they belong behind a firewall.
var open = map[string]bool{
	"/": true, "/status.json": true, "/stats.json": true, "/stats/series.json": true, "/stats/keys/series.json": true,
	"/metrics": true, "/healthz": true, "/livez": true, "/readyz": true,
}

// Open reports whether a request is served without a key.
func Open(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && open[r.URL.Path]
}

// Middleware returns the handler that authenticates every request but the
// open ones (Open) before next sees it: a refusal is answered in OpenAI's
// error shape (401 invalid_api_key, 429 rate_limit_exceeded for an
// address over its failed-authentication budget) with its headers, and an
// accepted key goes into the request's context (keys.NewContext). Every
// other path needs a key, whatever it is (a POST of any path is routed to
// an engine, and a path the router does not know answers 404 only to a
// client with a key).
func Middleware(a Authenticator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if Open(r) {
				next.ServeHTTP(w, r)
				return
			}
			k, rej := a.Authenticate(r.Header, ClientIP(r.RemoteAddr))
			if rej != nil {
				proxy.WriteRejection(w, rej, "")
				return
			}
			next.ServeHTTP(w, r.WithContext(keys.NewContext(r.Context(), k)))
		})
	}
}

// ClientIP is the address of the connection's peer, without its port. No
// forwarding header is believed: a client could name any address in one.
func ClientIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}
