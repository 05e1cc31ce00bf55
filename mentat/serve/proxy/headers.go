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

// userAgent is shared by every upstream request; the transport only
// reads it.
var userAgent = []string{"mentatd-serve"}

// upstreamHeader builds the header of the upstream request from the
// client's.
func upstreamHeader(in http.Header) http.Header {
	out := make(http.Header, len(forwarded)+1)
	fillUpstreamHeader(out, in)
	return out
}

// fillUpstreamHeader adds to out what an engine gets from in. The value
// slices are shared with the client's request, which nothing modifies
// while the upstream request is written.
func fillUpstreamHeader(out, in http.Header) {
	httpx.ForwardHeader(out, in, forwarded)
	// An explicit value stops the transport adding Go-http-client.
	out["User-Agent"] = userAgent
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
