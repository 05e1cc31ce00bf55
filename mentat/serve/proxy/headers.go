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

// upstreamHeader builds the header of the upstream request from the
// client's.
func upstreamHeader(in http.Header) http.Header {
	out := make(http.Header, len(forwarded)+1)
	for _, k := range forwarded {
		if v := in.Values(k); len(v) > 0 {
			out[k] = append([]string(nil), v...)
		}
	}
	// An explicit value stops the transport adding Go-http-client.
	out["User-Agent"] = []string{"mentatd-serve"}
	return out
}

// copyResponseHeader copies an upstream response header to the client's,
// without hop-by-hop headers (including those the upstream named in
// Connection).
func copyResponseHeader(dst, src http.Header) {
	var named []string
	for _, v := range src["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = http.CanonicalHeaderKey(strings.TrimSpace(f)); f != "" {
				named = append(named, f)
			}
		}
	}
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
		dst[k] = append(dst[k][:0:0], vv...)
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
