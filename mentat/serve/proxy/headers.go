package proxy

import (
	"net/http"

	"github.com/fe64bb06/frontdoor/internal/httpx"
)

// forwarded are the only request headers an engine gets: what it needs to
// parse the body, pick a response format, and check an API key. Everything
// else (cookies, hop-by-hop headers and those the client names in Connection, Expect, Idempotency-Key — which would
// let the Go transport re-send a POST) stays at the router. Content-Length
// is set from the buffered body.
var forwarded = []string{"Content-Type", "Accept", "Authorization"}

// forwardedKeyed is forwarded with keys on (SERVE_KEYS_FILE): the client's
// Authorization is a key of this router, never the engine's business.
var forwardedKeyed = []string{"Content-Type", "Accept"}

// userAgent is shared by every upstream request; the transport only
// reads it.
var userAgent = []string{"mentatd-serve"}

// upstreamHeader builds the header of the upstream request from the
// client's, as with keys off and no upstream key.
func upstreamHeader(in http.Header) http.Header { return buildUpstreamHeader(in, forwarded, nil) }

// buildUpstreamHeader is the upstream request's header: the fwd headers of
// in, and auth (the group's upstream key, SERVE_UPSTREAM_KEYS_FILE) as
// Authorization in place of anything the client sent. The value slices are
// shared with the client's request and the key store, which nothing
// modifies while the upstream request is written.
func buildUpstreamHeader(in http.Header, fwd []string, auth []string) http.Header {
	out := make(http.Header, len(fwd)+1)
	httpx.ForwardHeader(out, in, fwd)
	if auth != nil {
		out["Authorization"] = auth
	}
	// An explicit value stops the transport adding Go-http-client.
	out["User-Agent"] = userAgent
	return out
}

// markStream sets the headers that stop intermediaries (nginx, CDNs,
// browsers) from buffering or caching an event stream.
func markStream(h http.Header) {
	h["X-Accel-Buffering"] = noBuffering
	h["Cache-Control"] = noCache
}

// The values markStream sets, shared by every stream: net/http copies a
// handler's header when the status line is written, and the proxy never
// appends to these.
var (
	noBuffering = []string{"no"}
	noCache     = []string{"no-cache"}
)
