package proxy

import (
	"net/http"
	"strings"
)

// forwarded are the only request headers an engine gets: what it needs to
// parse the body, pick a response format, and check an API key. Everything
// else (cookies, hop-by-hop headers, Expect, Idempotency-Key — which would
// let the Go transport re-send a POST) stays at the router. Content-Length
// is set from the buffered body.
var forwarded = []string{"Content-Type", "Accept", "Authorization"}

// hopByHop are the RFC 9110 §7.6.1 connection-specific headers, plus the
// legacy ones the stdlib's ReverseProxy also drops.
var hopByHop = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

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
	for _, k := range forwarded {
		if v := in[k]; len(v) > 0 {
			out[k] = v
		}
	}
	// An explicit value stops the transport adding Go-http-client.
	out["User-Agent"] = userAgent
}

// copyResponseHeader copies an upstream response header to the client's,
// without hop-by-hop headers (including those the upstream named in
// Connection). The values are copied into one backing array (one
// allocation, not one per header); each key's slice is capped so an
// append to it cannot run into the next key's values.
func copyResponseHeader(dst, src http.Header) {
	var named []string
	for _, v := range src["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = http.CanonicalHeaderKey(strings.TrimSpace(f)); f != "" {
				named = append(named, f)
			}
		}
	}
	n := 0
	for _, vv := range src {
		n += len(vv)
	}
	vals := make([]string, 0, n)
outer:
	for k, vv := range src {
		for _, h := range hopByHop {
			if k == h {
				continue outer
			}
		}
		for _, h := range named {
			if k == h {
				continue outer
			}
		}
		i := len(vals)
		vals = append(vals, vv...)
		dst[k] = vals[i:len(vals):len(vals)]
	}
}

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// markStream sets the headers that stop intermediaries (nginx, CDNs,
// browsers) from buffering or caching an event stream.
func markStream(h http.Header) {
	h.Set("X-Accel-Buffering", "no")
	h.Set("Cache-Control", "no-cache")
}
