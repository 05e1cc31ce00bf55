package h1client

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/fe64bb06/frontdoor/internal/h1syntax"
)

var heads = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func putHead(b *[]byte) {
	if cap(*b) <= 2*maxInlineBody {
		*b = (*b)[:0]
		heads.Put(b)
	}
}

// requestHead writes the request line and header: Host, the client's
// User-Agent, req's headers and the body's length. Keys and values
// net/http would refuse to send are refused.
func (c *Client) requestHead(method string, req *Request) (*[]byte, error) {
	bp := heads.Get().(*[]byte)
	b := append((*bp)[:0], method...)
	b = append(b, ' ')
	b = append(b, req.Target.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, HostHeader(req.Target.Host)...)
	b = append(b, "\r\nUser-Agent: "...)
	b = append(b, c.userAgent...)
	b = append(b, "\r\n"...)
	var err error
	if req.Keys != nil {
		for _, k := range req.Keys {
			if b, err = appendHeader(b, k, req.Header[k]); err != nil {
				break
			}
		}
	} else {
		for k, vv := range req.Header {
			if b, err = appendHeader(b, k, vv); err != nil {
				break
			}
		}
	}
	if err != nil {
		*bp = b
		putHead(bp)
		return nil, err
	}
	n := int64(len(req.Body))
	if req.BodyReader != nil {
		n = req.ContentLength
	}
	if n > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, n, 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	*bp = b
	return bp, nil
}

// appendHeader writes one header's values, trimmed as net/http writes
// them.
func appendHeader(b []byte, k string, vv []string) ([]byte, error) {
	// The client's own, and framing a caller must not choose.
	if strings.EqualFold(k, "Host") || strings.EqualFold(k, "User-Agent") ||
		strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Transfer-Encoding") {
		return b, nil
	}
	if len(vv) > 0 && !h1syntax.IsToken(k) {
		return b, fmt.Errorf("invalid request header name %q", k)
	}
	for _, v := range vv {
		if !validHeaderValue(v) {
			return b, fmt.Errorf("invalid value for request header %s (control character)", k)
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, strings.Trim(v, " \t")...)
		b = append(b, "\r\n"...)
	}
	return b, nil
}

// HostHeader is the Host header for a URL host as net/http writes it: no
// empty port, no IPv6 zone.
func HostHeader(host string) string {
	host = strings.TrimSuffix(host, ":")
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, '%'); i >= 0 {
			if j := strings.IndexByte(host[i:], ']'); j >= 0 {
				return host[:i] + host[i+j:]
			}
		}
	}
	return host
}

// validHeaderValue is net/http's rule for a value it will send: no
// control characters but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}
