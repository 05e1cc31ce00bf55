package httpx

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/rs/cors"
)

// CORSHeaders are the answer headers a browser page may read: the rate-limit
// and retry headers a client needs to back off, the request id and the MCP
// session id.
var CORSHeaders = []string{
	"Retry-After", "Retry-After-Ms",
	"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
	"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens",
	"X-Ratelimit-Limit-Images", "X-Ratelimit-Remaining-Images", "X-Ratelimit-Reset-Images",
	"X-Request-Id", "Mcp-Session-Id", "Mcp-Protocol-Version", "X-Mortred-Model",
}

// CheckOrigins validates a configured origin list: each entry a scheme and
// host ("https://app.example", "http://localhost:3000") without path, and
// never "*" (a page of any site must not call with the user's key).
func CheckOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" || strings.Contains(o, "*") {
			return fmt.Errorf("CORS origin %q: wildcards are not allowed; list each origin that may call with credentials", o)
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("CORS origin %q is not an origin; write scheme://host[:port], e.g. https://app.example.com", o)
		}
	}
	return nil
}

// CORS wraps next so that browser pages of the listed origins may call it
// with credentials (an Authorization header): their preflight is answered
// (204, the origin echoed, never "*"), their answers carry
// Access-Control-Allow-Origin and CORSHeaders exposed. A preflight from any
// other origin is refused with 403 and no CORS header; other requests of
// other origins pass through untouched (the browser withholds the answer
// from the page). An empty list returns next itself.
func CORS(origins []string, next http.Handler) (http.Handler, error) {
	if len(origins) == 0 {
		return next, nil
	}
	if err := CheckOrigins(origins); err != nil {
		return nil, err
	}
	norm := make([]string, len(origins))
	for i, o := range origins {
		norm[i] = strings.TrimSuffix(o, "/")
	}
	c := cors.New(cors.Options{
		AllowedOrigins: norm,
		AllowedMethods: []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodHead},
		// The OpenAI clients send their own x-stainless-* and openai-*
		// headers; a listed origin may send any header it asks for.
		AllowedHeaders:   []string{"*"},
		ExposedHeaders:   CORSHeaders,
		AllowCredentials: true,
		MaxAge:           600,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" && !c.OriginAllowed(r) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Vary", "Origin")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("origin not allowed\n"))
			return
		}
		c.ServeHTTP(w, r, next.ServeHTTP)
	}), nil
}
