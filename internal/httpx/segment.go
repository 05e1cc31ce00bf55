package httpx

import "strings"

// PlainSegment reports whether s is one URL path segment made only of
// unreserved characters (letters, digits, "-._~"), and not a dot segment:
// it means the same decoded and escaped, so it can go into another path
// (a model server's, an Nginx location) without becoming a different one.
func PlainSegment(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0) {
			return false
		}
	}
	return true
}
