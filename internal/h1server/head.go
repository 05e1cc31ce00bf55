package h1server

import (
	"bytes"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/h1syntax"
)

// maxFields bounds the header fields of a request the fast path parses;
// more go to the fallback server.
const maxFields = 64

// Head is a request's line and header fields, as the client sent them.
// Its slices point into the connection's scratch buffer: valid until the
// handler returns, never to be kept.
type Head struct {
	// Method, Path and Query (without the '?') as sent: the path is in
	// origin form and has no '%' escapes (such requests go to the
	// fallback).
	Method, Path, Query []byte
	// ContentLength is the body's length; 0 when the request has none.
	ContentLength int64
	// Close is set when the client asked for the connection to be closed
	// after this exchange.
	Close bool
	// Buffered is how many bytes after the head arrived with it: when at
	// least ContentLength, the whole body is in memory and reading it
	// cannot block.
	Buffered int64
	fields   []field
	// scratch holds the head's bytes; reused by the next request.
	scratch []byte
}

type field struct{ name, value []byte }

// Get returns the value of the first field named name (ASCII case
// insensitive), or nil.
func (h *Head) Get(name string) []byte {
	for i := range h.fields {
		if equalFold(h.fields[i].name, name) {
			return h.fields[i].value
		}
	}
	return nil
}

// Count returns how many fields are named name.
func (h *Head) Count(name string) int {
	n := 0
	for i := range h.fields {
		if equalFold(h.fields[i].name, name) {
			n++
		}
	}
	return n
}

// equalFold is ASCII case-insensitive equality of a field name and a
// lower- or mixed-case constant.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if x == y {
			continue
		}
		if x|0x20 != y|0x20 || x|0x20 < 'a' || x|0x20 > 'z' {
			return false
		}
	}
	return true
}

// headEnd returns the length of the head in buf (through the blank line),
// or -1 when buf holds no complete head. Like net/http it ends a head at
// a blank line after a bare LF too ("\n\n", "\n\r\n"): parse declines
// such a head, so the fallback gets it instead of the connection waiting
// for a CRLF CRLF that may never come.
func headEnd(buf []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(buf) && buf[i] == '\n':
			return i + 1
		case i+1 < len(buf) && buf[i] == '\r' && buf[i+1] == '\n':
			return i + 2
		}
	}
}

// hostPunct is the punctuation net/http's server allows in a Host value
// (httpguts.ValidHostHeader: a host, an IPv6 literal, a port); with
// letters and digits, nothing else.
const hostPunct = "!$%&'()*+,-.:;=[]_~"

// validHost reports whether net/http's server takes v as a Host value:
// one it answers 400 to must reach it.
func validHost(v []byte) bool {
	for _, c := range v {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(hostPunct, c) >= 0) {
			return false
		}
	}
	return true
}

// parse fills h from a complete head (through its blank line), copying it
// into h's scratch buffer. It reports false for anything the fast path
// leaves to the fallback server, which answers it with net/http's full
// rules: another protocol version, an absolute or asterisk target, escapes
// in the path, obsolete line folding, bare LF, control characters,
// Transfer-Encoding, Expect, Upgrade, a missing, repeated or malformed
// Host, a
// repeated or malformed Content-Length, a Connection option other than
// close or keep-alive, or too many fields.
func (h *Head) parse(raw []byte) bool {
	h.scratch = append(h.scratch[:0], raw...)
	b := h.scratch[:len(h.scratch)-2] // drop the blank line's CRLF
	h.fields = h.fields[:0]
	h.ContentLength, h.Close = 0, false

	line, rest, ok := cutLine(b)
	if !ok {
		return false
	}
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return false
	}
	h.Method = line[:sp1]
	if !h1syntax.IsToken(h.Method) {
		return false
	}
	target := line[sp1+1:]
	sp2 := bytes.IndexByte(target, ' ')
	if sp2 <= 0 || string(target[sp2+1:]) != "HTTP/1.1" {
		return false
	}
	target = target[:sp2]
	if target[0] != '/' {
		return false
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	h.Path, h.Query = target, nil
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		h.Path, h.Query = target[:q], target[q+1:]
	}
	if bytes.IndexByte(h.Path, '%') >= 0 {
		return false
	}

	hosts, lengths := 0, 0
	for len(rest) > 0 {
		if line, rest, ok = cutLine(rest); !ok {
			return false
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || len(h.fields) == maxFields {
			return false
		}
		name := line[:colon]
		if !h1syntax.IsToken(name) {
			return false
		}
		value := trimOWS(line[colon+1:])
		for _, c := range value {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return false
			}
		}
		switch {
		case equalFold(name, "host"):
			hosts++
			if !validHost(value) {
				return false
			}
		case equalFold(name, "content-length"):
			lengths++
			n, ok := h1syntax.ParseLength(value)
			if !ok {
				return false
			}
			h.ContentLength = n
		case equalFold(name, "transfer-encoding"), equalFold(name, "expect"), equalFold(name, "upgrade"):
			return false
		case equalFold(name, "connection"):
			switch {
			case equalFold(value, "close"):
				h.Close = true
			case equalFold(value, "keep-alive"):
			default:
				return false
			}
		}
		h.fields = append(h.fields, field{name, value})
	}
	return hosts == 1 && lengths <= 1
}

// cutLine splits off one CRLF-terminated line (the last one may lack its
// CRLF: parse cut it). A bare CR or LF inside fails.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		line, rest = b, nil
	} else {
		if i == 0 || b[i-1] != '\r' {
			return nil, nil, false
		}
		line, rest = b[:i-1], b[i+1:]
	}
	if bytes.IndexByte(line, '\r') >= 0 || len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
		return nil, nil, false
	}
	return line, rest, true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// CleanPath reports whether net/http's ServeMux keeps path p as it is (no
// empty, "." or ".." segments): a handler's Take declines any other, so
// the fallback's mux answers it as it always has (with a redirect).
func CleanPath(p []byte) bool {
	s := string(p)
	return !strings.Contains(s, "//") && !strings.Contains(s, "/./") && !strings.Contains(s, "/../") &&
		!strings.HasSuffix(s, "/.") && !strings.HasSuffix(s, "/..")
}
