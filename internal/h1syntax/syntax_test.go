package h1syntax

import (
	"strings"
	"testing"
)

// TestIsToken holds the table to RFC 9110: visible ASCII but the
// delimiters.
func TestIsToken(t *testing.T) {
	const delimiters = "\"(),/:;<=>?@[\\]{}"
	for c := 0; c < 256; c++ {
		want := c > ' ' && c < 0x7f && !strings.ContainsRune(delimiters, rune(c))
		if got := IsTokenChar(byte(c)); got != want {
			t.Errorf("IsTokenChar(%#x) = %v, want %v", c, got, want)
		}
	}
	for _, tc := range []struct {
		in   string
		want bool
	}{{"Content-Length", true}, {"X_y.z~1", true}, {"", false}, {"a b", false}, {"a:b", false}, {"é", false}} {
		if IsToken(tc.in) != tc.want || IsToken([]byte(tc.in)) != tc.want {
			t.Errorf("IsToken(%q) != %v", tc.in, tc.want)
		}
	}
}

func TestParseLength(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int64
		want bool
	}{{"0", 0, true}, {"123", 123, true}, {"999999999999999999", 999999999999999999, true},
		{"", 0, false}, {"1000000000000000000", 0, false}, {"+1", 0, false}, {"-1", 0, false}, {" 1", 0, false}, {"1a", 0, false}} {
		n, ok := ParseLength([]byte(tc.in))
		if ok != tc.want || (ok && n != tc.n) {
			t.Errorf("ParseLength(%q) = %d, %v", tc.in, n, ok)
		}
	}
}
