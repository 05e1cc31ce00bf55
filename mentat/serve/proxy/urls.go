package proxy

import (
	"net/url"
	"strings"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// Target resolves a client request URL against a route. A path under /v1
// joins onto the announced base (which ends in /v1): /v1/chat/completions
// on http://h:8000/v1 is http://h:8000/v1/chat/completions. Any other path
// is an engine root-level path (/tokenize, /detokenize) and joins onto the
// base with /v1 removed (Route.Root). The query string is kept; path
// escaping is preserved as the client sent it.
func Target(rt *routes.Route, req *url.URL) *url.URL {
	p := req.EscapedPath()
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	base, rest := rt.Root, p
	if p == "/v1" || strings.HasPrefix(p, "/v1/") {
		base, rest = rt.Base, p[len("/v1"):]
	}
	out := *base
	out.User = base.User
	out.Fragment, out.RawFragment = "", ""
	escaped := strings.TrimRight(base.EscapedPath(), "/") + rest
	if escaped == "" {
		escaped = "/"
	}
	if path, err := url.PathUnescape(escaped); err == nil {
		out.Path, out.RawPath = path, escaped
	} else {
		out.Path, out.RawPath = strings.TrimRight(base.Path, "/")+req.Path, ""
	}
	switch {
	case base.RawQuery == "":
		out.RawQuery = req.RawQuery
	case req.RawQuery != "":
		out.RawQuery = base.RawQuery + "&" + req.RawQuery
	}
	out.ForceQuery = false
	return &out
}
