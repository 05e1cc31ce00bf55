package httpx

import (
	"net/http"
	"strings"
)

// hopByHop are the RFC 9110 §7.6.1 connection-specific fields, plus the
// legacy ones net/http/httputil.ReverseProxy also drops. Fields a message
// names in its Connection header are hop-by-hop too (connectionNamed).
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

// connectionNamed returns the canonical field names h's Connection header
// lists; nil when it has none (the common case, no allocation).
func connectionNamed(h http.Header) []string {
	var named []string
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = http.CanonicalHeaderKey(strings.TrimSpace(f)); f != "" {
				named = append(named, f)
			}
		}
	}
	return named
}

func isHopByHop(k string, named []string) bool {
	for _, h := range hopByHop {
		if k == h {
			return true
		}
	}
	for _, h := range named {
		if k == h {
			return true
		}
	}
	return false
}

// NamedInConnection reports whether h's Connection header names the field
// key (canonical), which makes it hop-by-hop.
func NamedInConnection(h http.Header, key string) bool {
	for _, f := range connectionNamed(h) {
		if f == key {
			return true
		}
	}
	return false
}

// IsEventStream reports whether a Content-Type is text/event-stream.
func IsEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// CopyResponseHeader copies an upstream answer's header into the client's,
// without hop-by-hop fields (including those the upstream named in its
// Connection header) and without its Date: the answer is dated by the
// server that sends it, here, as Nginx's proxy does by default (net/http
// adds the Date). Leaving it out also keeps a keyed answer's header map,
// with its six rate-limit fields, at the eight entries of a small map, which
// net/http would otherwise grow on every request. The values are copied
// into one backing array (one allocation, not one per field); each key's
// slice is capped so an append to it cannot run into the next key's values.
func CopyResponseHeader(dst, src http.Header) {
	named := connectionNamed(src)
	n := 0
	for _, vv := range src {
		n += len(vv)
	}
	vals := make([]string, 0, n)
	for k, vv := range src {
		if k == "Date" || isHopByHop(k, named) {
			continue
		}
		i := len(vals)
		vals = append(vals, vv...)
		dst[k] = vals[i:len(vals):len(vals)]
	}
}

// ForwardHeader sets in out the fields of keys (canonical names) that in
// carries, except those in's Connection header names: a field the client
// made hop-by-hop does not go upstream. The value slices are shared with
// in, which nothing modifies while the upstream request is written.
func ForwardHeader(out, in http.Header, keys []string) {
	var named []string
	if len(in["Connection"]) > 0 {
		named = connectionNamed(in)
	}
	for _, k := range keys {
		if v := in[k]; len(v) > 0 && !isHopByHop(k, named) {
			out[k] = v
		}
	}
}
