package serve

import (
	"net/http"
	"path"
	"strings"
)

// mux is the router's http.ServeMux with one shortcut for the hot path:
// a POST that only the catch-all "/" pattern can match goes straight to
// that pattern's handler (the proxy). The ServeMux would pick the same
// handler, but matching "/" against every request's path costs more CPU
// and allocations than the rest of routing. The shortcut is taken only
// when the ServeMux's choice is certain: a clean path without escapes
// (else the ServeMux redirects or unescapes), and no other pattern that
// accepts POST on that exact path. Patterns the shortcut cannot reason
// about (host names, wildcards, subtrees) turn it off.
type mux struct {
	m *http.ServeMux
	// root is the "/" pattern's handler; nil: no shortcut.
	root http.Handler
	// posts are the exact paths of the other patterns that accept POST.
	posts map[string]bool
	// off is set by a pattern the shortcut cannot reason about.
	off bool
}

func newMux() *mux { return &mux{m: http.NewServeMux(), posts: map[string]bool{}} }

// Handle registers h for pattern on the ServeMux (which validates it).
func (x *mux) Handle(pattern string, h http.Handler) {
	x.m.Handle(pattern, h)
	method, p := "", pattern
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		method, p = pattern[:i], strings.TrimLeft(pattern[i:], " \t")
	}
	switch {
	case method != "" && method != http.MethodPost:
		// Never matches a POST.
	case p == "/":
		x.root = h
	case !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "{%") || strings.HasSuffix(p, "/"):
		x.off = true
	default:
		x.posts[p] = true
	}
}

// HandleFunc is Handle for a function.
func (x *mux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	x.Handle(pattern, http.HandlerFunc(f))
}

// ServeHTTP implements http.Handler.
func (x *mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if x.shortcut(r) {
		r.Pattern = "/"
		x.root.ServeHTTP(w, r)
		return
	}
	x.m.ServeHTTP(w, r)
}

// shortcut reports whether r certainly goes to the "/" pattern.
func (x *mux) shortcut(r *http.Request) bool {
	if r.Method != http.MethodPost || x.root == nil || x.off || r.RequestURI == "*" || r.URL.RawPath != "" {
		return false
	}
	p := r.URL.Path
	return isCleanPath(p) && !x.posts[p]
}

// isCleanPath reports whether the ServeMux would take p as it is: it
// starts with a slash, has no characters it would match escaped, and no
// empty, "." or ".." segment but a trailing slash (the ServeMux redirects
// to the cleaned path otherwise). path.Clean does not allocate for a path
// it leaves unchanged.
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '?' || c == '#' {
			return false
		}
	}
	c := path.Clean(p)
	if p[len(p)-1] == '/' && c != "/" {
		return len(c) == len(p)-1 && p[:len(c)] == c
	}
	return c == p
}
