// Package ui is the supervisor's embedded web UI: one self-contained page
// (no build step, no external assets) that talks to the management API with
// the token the operator pastes once (kept in sessionStorage), and sends the
// inference smoke test through the gateway.
package ui

import (
	_ "embed"
	"net/http"

	"github.com/fe64bb06/frontdoor/internal/charts"
)

//go:embed index.html
var rawPage []byte

// page is index.html with the chart script and style shared with the
// router's status page (internal/charts) inlined.
var page = charts.Inline(rawPage)

// Handler serves the page at / and 404 elsewhere.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && r.URL.Path != "/index.html" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// The page runs only its own inline code and talks only to its origin.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write(page)
	})
}
