// Package h1syntax holds the HTTP/1.1 grammar rules that the fast server
// (internal/h1server) and the upstream client (internal/h1client) both
// check, so the two read a head byte for byte alike.
package h1syntax

// tokenChar marks RFC 9110's tchar.
var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// IsTokenChar reports whether c may appear in a token.
func IsTokenChar(c byte) bool { return tokenChar[c] }

// IsToken is RFC 9110's token rule (a field name, a method).
func IsToken[T string | []byte](b T) bool {
	if len(b) == 0 {
		return false
	}
	for i := 0; i < len(b); i++ {
		if !tokenChar[b[i]] {
			return false
		}
	}
	return true
}

// ParseLength reads a Content-Length value: 1 to 18 decimal digits,
// nothing else (no sign, no spaces, no overflow).
func ParseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
