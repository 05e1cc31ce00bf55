// Package ui serves the router's front page: the live status page for a
// browser, the status document for everything else. The page is one
// self-contained HTML file (inline CSS and script, no external assets, no
// build step) embedded in the binary, with the shared chart script of
// internal/charts inlined; it polls stats.json and stats/series.json beside
// it.
package ui

import (
	_ "embed"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/charts"
)

//go:embed status.html
var rawPage []byte

var page = charts.Inline(rawPage)

// csp keeps the page honest about being self-contained: a reference to any
// other origin, or to any file but its own JSON routes, fails in the browser.
const csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves GET /. A request whose Accept header asks for HTML gets
// the status page; any other gets statusDoc() as JSON (the /status.json
// document), so curl and scripts keep reading the document at /.
func Handler(statusDoc func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "/ answers GET only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Vary", "Accept")
		w.Header().Set("Cache-Control", "no-cache")
		if WantsHTML(r.Header.Values("Accept")) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Security-Policy", csp)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Content-Length", strconv.Itoa(len(page)))
			_, _ = w.Write(page)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(statusDoc())
	})
}

// WantsHTML reports whether an Accept header names HTML (text/html or
// application/xhtml+xml) with a non-zero quality. Wildcards do not count:
// curl's */* gets the document.
func WantsHTML(accept []string) bool {
	for _, line := range accept {
		for _, rng := range strings.Split(line, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(rng))
			if err != nil {
				continue
			}
			if mt != "text/html" && mt != "application/xhtml+xml" {
				continue
			}
			if q, ok := params["q"]; ok {
				if v, err := strconv.ParseFloat(q, 64); err != nil || v <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

// Page returns the embedded status page, for tests and tools.
func Page() []byte { return page }
