package h1server

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// parseString parses s, which must be one whole head.
func parseString(t testing.TB, s string) (*Head, bool) {
	t.Helper()
	if n := headEnd([]byte(s)); n != len(s) {
		t.Fatalf("headEnd(%q) = %d, want %d", s, n, len(s))
	}
	h := &Head{}
	return h, h.parse([]byte(s))
}

// manyFields is a head with n fields besides Host.
func manyFields(n int) string {
	var b strings.Builder
	b.WriteString("POST /fast HTTP/1.1\r\nHost: a\r\n")
	for i := range n {
		fmt.Fprintf(&b, "X-F%d: v\r\n", i)
	}
	b.WriteString("\r\n")
	return b.String()
}

func TestParseAccepts(t *testing.T) {
	type want struct {
		method, path, query string
		nilQuery            bool
		length              int64
		close               bool
		fields              map[string]string // name as asked (any case) → first value
		counts              map[string]int
	}
	tests := []struct {
		name string
		raw  string
		want want
	}{
		{"minimal GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
			want{method: "GET", path: "/", nilQuery: true, fields: map[string]string{"host": "a"}}},
		{"POST with length and fields",
			"POST /v1/chat/completions HTTP/1.1\r\nHost: example.com:8080\r\nContent-Type: application/json\r\nContent-Length: 42\r\nAuthorization: Bearer x\r\n\r\n",
			want{method: "POST", path: "/v1/chat/completions", nilQuery: true, length: 42,
				fields: map[string]string{"HOST": "example.com:8080", "content-type": "application/json", "Authorization": "Bearer x", "CONTENT-length": "42"}}},
		{"query split", "GET /a/b?x=1&y=%20z HTTP/1.1\r\nHost: a\r\n\r\n",
			want{method: "GET", path: "/a/b", query: "x=1&y=%20z"}},
		{"empty query", "GET /a? HTTP/1.1\r\nHost: a\r\n\r\n",
			want{method: "GET", path: "/a", query: ""}},
		{"second '?' stays in the query", "GET /a?b?c HTTP/1.1\r\nHost: a\r\n\r\n",
			want{method: "GET", path: "/a", query: "b?c"}},
		{"path punctuation", "GET /a;b=c/d:e@f!$&'()*+,~._- HTTP/1.1\r\nHost: a\r\n\r\n",
			want{method: "GET", path: "/a;b=c/d:e@f!$&'()*+,~._-", nilQuery: true}},
		{"token method", "M-SEARCH! /x HTTP/1.1\r\nHost: a\r\n\r\n",
			want{method: "M-SEARCH!", path: "/x", nilQuery: true}},
		{"Connection close", "POST /fast HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true, close: true}},
		{"Connection close any case", "POST /fast HTTP/1.1\r\nHost: a\r\nconnection: CLOSE\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true, close: true}},
		{"Connection keep-alive", "POST /fast HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true}},
		{"Connection keep-alive then close", "POST /fast HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true, close: true, counts: map[string]int{"connection": 2}}},
		{"OWS trimmed, inner kept", "GET / HTTP/1.1\r\nHost:\t a \t\r\nX-A:  b  c \r\n\r\n",
			want{method: "GET", path: "/", nilQuery: true, fields: map[string]string{"host": "a", "x-a": "b  c"}}},
		{"empty value", "GET / HTTP/1.1\r\nHost: a\r\nX-Empty:\r\n\r\n",
			want{method: "GET", path: "/", nilQuery: true, fields: map[string]string{"x-empty": ""}}},
		{"tab and obs-text in values", "GET / HTTP/1.1\r\nHost: a\r\nX-T: a\tb\xe9\r\n\r\n",
			want{method: "GET", path: "/", nilQuery: true, fields: map[string]string{"X-T": "a\tb\xe9"}}},
		{"repeated field: first value, counted", "POST /fast HTTP/1.1\r\nHost: a\r\nAccept: x\r\naccept: y\r\nACCEPT: z\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true, fields: map[string]string{"Accept": "x"}, counts: map[string]int{"accept": 3, "Host": 1, "x-none": 0}}},
		{"zero length", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true}},
		{"leading zeros", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true, length: 7}},
		{"18 digits", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999999999999\r\n\r\n",
			want{method: "POST", path: "/fast", nilQuery: true, length: 999999999999999999}},
		{"64 fields", manyFields(maxFields - 1),
			want{method: "POST", path: "/fast", nilQuery: true, counts: map[string]int{"x-f62": 1}}},
		{"empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n",
			want{method: "GET", path: "/", nilQuery: true, fields: map[string]string{"Host": ""}}},
		{"IPv6 Host with zone and port", "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]:8080\r\n\r\n",
			want{method: "GET", path: "/", nilQuery: true, fields: map[string]string{"Host": "[fe80::1%25eth0]:8080"}}},
		{"Host punctuation", "GET / HTTP/1.1\r\nHost: a_b~c!$&'()*+,;=.d:1\r\n\r\n",
			want{method: "GET", path: "/", nilQuery: true, fields: map[string]string{"Host": "a_b~c!$&'()*+,;=.d:1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := parseString(t, tt.raw)
			if !ok {
				t.Fatalf("parse(%q) declined, want accepted", tt.raw)
			}
			w := tt.want
			if string(h.Method) != w.method || string(h.Path) != w.path || string(h.Query) != w.query {
				t.Errorf("method, path, query = %q %q %q, want %q %q %q", h.Method, h.Path, h.Query, w.method, w.path, w.query)
			}
			if (h.Query == nil) != w.nilQuery {
				t.Errorf("Query nil = %v, want %v", h.Query == nil, w.nilQuery)
			}
			if h.ContentLength != w.length || h.Close != w.close {
				t.Errorf("ContentLength, Close = %d %v, want %d %v", h.ContentLength, h.Close, w.length, w.close)
			}
			for name, v := range w.fields {
				if got := h.Get(name); got == nil || string(got) != v {
					t.Errorf("Get(%q) = %q (nil %v), want %q", name, got, got == nil, v)
				}
			}
			for name, n := range w.counts {
				if got := h.Count(name); got != n {
					t.Errorf("Count(%q) = %d, want %d", name, got, n)
				}
			}
			if h.Get("X-Not-There") != nil {
				t.Error("Get of an absent field is not nil")
			}
		})
	}
}

func TestParseDeclines(t *testing.T) {
	tests := []struct{ name, raw string }{
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: a\r\n\r\n"},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n"},
		{"lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n"},
		{"no version", "GET /\r\nHost: a\r\n\r\n"},
		{"extra word in the request line", "GET / x HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"two spaces after the method", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"trailing space after the version", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n"},
		{"empty method", " / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"method not a token", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"NUL in the method", "G\x00T / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"absolute-form target", "GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"authority-form target", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n"},
		{"asterisk target", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"'%' in the path", "GET /a%2Fb HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"'#' in the target", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"non-ASCII in the target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"DEL in the target", "GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"NUL in the target", "GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"tab in the target", "GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"},
		{"obs-fold with a tab", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n"},
		{"first field folded", "GET / HTTP/1.1\r\n Host: a\r\n\r\n"},
		{"bare LF after the request line", "GET / HTTP/1.1\nHost: a\r\n\r\n"},
		{"bare LF between fields", "GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n"},
		{"bare LF ends the head", "GET / HTTP/1.1\r\nHost: a\r\n\n"},
		{"bare LF line then CRLF", "GET / HTTP/1.1\r\nHost: a\n\r\n"},
		{"bare CR in a value", "GET / HTTP/1.1\r\nHost: a\rX-A: b\r\n\r\n"},
		{"bare CR in the request line", "GET /\r HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"control character in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n\r\n"},
		{"escape in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: \x1b[1m\r\n\r\n"},
		{"DEL in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x7f\r\n\r\n"},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n"},
		{"NUL in a name", "GET / HTTP/1.1\r\nHost: a\r\nX\x00A: b\r\n\r\n"},
		{"Transfer-Encoding chunked", "POST /fast HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"Transfer-Encoding identity", "POST /fast HTTP/1.1\r\nHost: a\r\ntransfer-encoding: identity\r\n\r\n"},
		{"Transfer-Encoding with Content-Length", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"Expect", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"},
		{"Upgrade", "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n"},
		{"missing Host", "GET / HTTP/1.1\r\nX-A: b\r\n\r\n"},
		{"no fields", "GET / HTTP/1.1\r\n\r\n"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"},
		{"space in Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"},
		{"slash in Host", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"},
		{"userinfo in Host", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"},
		{"non-ASCII Host", "GET / HTTP/1.1\r\nHost: \xc3\xa9.example\r\n\r\n"},
		{"tab in Host", "GET / HTTP/1.1\r\nHost: a\tb\r\n\r\n"},
		{"two Hosts, other case", "GET / HTTP/1.1\r\nHost: a\r\nhOST: b\r\n\r\n"},
		{"two Content-Lengths", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"},
		{"two differing Content-Lengths", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\ncontent-length: 4\r\n\r\n"},
		{"Content-Length not digits", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 3a\r\n\r\n"},
		{"Content-Length negative", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"},
		{"Content-Length signed", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n"},
		{"Content-Length list", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\n"},
		{"Content-Length inner space", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n"},
		{"Content-Length empty", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n"},
		{"Content-Length hex", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n"},
		{"Content-Length 19 digits", "POST /fast HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000000000000000\r\n\r\n"},
		{"Connection upgrade", "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n"},
		{"Connection list", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n"},
		{"Connection naming a field", "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Secret\r\n\r\n"},
		{"Connection empty", "GET / HTTP/1.1\r\nHost: a\r\nConnection:\r\n\r\n"},
		{"too many fields", manyFields(maxFields)},
		{"space before the colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n"},
		{"tab before the colon", "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n"},
		{"empty name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n"},
		{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A\r\n\r\n"},
		{"separator in a name", "GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n"},
		{"non-ASCII name", "GET / HTTP/1.1\r\nHost: a\r\nX\xe9: b\r\n\r\n"},
		{"empty line inside", "GET / HTTP/1.1\r\n\r\nHost: a\r\n\r\n"},
		{"empty request line", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"},
		{"only a blank line", "\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A whole head must be found (else the fallback would never
			// see it), and the head must be declined.
			n := headEnd([]byte(tt.raw))
			if n < 0 {
				t.Fatalf("headEnd(%q) = -1: the head would never be complete", tt.raw)
			}
			var h Head
			if h.parse([]byte(tt.raw[:n])) {
				t.Fatalf("parse(%q) accepted, want declined", tt.raw[:n])
			}
		})
	}
}

// TestParseReuse: the head is a copy, and a second parse into the same
// Head leaves nothing of the first.
func TestParseReuse(t *testing.T) {
	var h Head
	raw := []byte("POST /one?q=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 5\r\nX-One: 1\r\n\r\n")
	if !h.parse(raw) {
		t.Fatal("first head declined")
	}
	for i := range raw {
		raw[i] = 'z'
	}
	if string(h.Path) != "/one" || string(h.Get("X-One")) != "1" {
		t.Fatalf("head changed with its source buffer: path %q, X-One %q", h.Path, h.Get("X-One"))
	}
	if !h.parse([]byte("GET /two HTTP/1.1\r\nHost: b\r\n\r\n")) {
		t.Fatal("second head declined")
	}
	if string(h.Path) != "/two" || h.Query != nil || h.ContentLength != 0 || h.Close || h.Get("X-One") != nil || string(h.Get("host")) != "b" {
		t.Fatalf("second head kept parts of the first: path %q query %q length %d close %v X-One %q",
			h.Path, h.Query, h.ContentLength, h.Close, h.Get("X-One"))
	}
	// A declined head leaves no stale length or close flag either.
	if h.parse([]byte("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\nExpect: 100-continue\r\n\r\n")) {
		t.Fatal("Expect accepted")
	}
}

func TestHeadEnd(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", -1},
		{"GET / HTTP/1.1\r\nHost: a\r\n", -1},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r", -1},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody\r\n\r\n", 27},
		// net/http ends a head at a bare-LF blank line too: such a head
		// must be found whole, to go to the fallback.
		{"GET / HTTP/1.1\nHost: a\n\n", 24},
		{"GET / HTTP/1.1\nHost: a\n\r\nbody", 25},
		{"GET / HTTP/1.1\r\nHost: a\r\n\nbody\r\n\r\n", 26},
		{"GET / HTTP/1.1\r\nHost: a\r\r\n", -1},
	}
	for _, tt := range tests {
		if got := headEnd([]byte(tt.in)); got != tt.want {
			t.Errorf("headEnd(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

var fuzzSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: h:1\r\nContent-Length: 12\r\nContent-Type: application/json\r\n\r\n{\"model\":1}",
	"POST /fast HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
	"POST /fast HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
	"GET /a? HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /a?b?c#d HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /%41 HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\x00\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n",
	"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
	"GET / HTTP/1.1\r\n: a\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost:\t a \t\r\nX-A: \xff\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	manyFields(maxFields),
}

// FuzzParse: parse never panics, and what it accepts net/http reads the
// same way: the fast path must never serve a request net/http would
// refuse or see differently.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	var h Head // reused, as a connection reuses its Head
	f.Fuzz(func(t *testing.T, data []byte) {
		n := headEnd(data)
		if n < 0 {
			return
		}
		raw := data[:n]
		if !h.parse(raw) {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("parse accepted %q; net/http: %v", raw, err)
		}
		if req.ProtoMajor != 1 || req.ProtoMinor != 1 || req.URL.IsAbs() || req.URL.Host != "" {
			t.Fatalf("parse accepted %q: net/http reads %s %s", raw, req.Proto, req.URL)
		}
		if req.Method != string(h.Method) || req.URL.Path != string(h.Path) || req.URL.RawQuery != string(h.Query) {
			t.Fatalf("parse(%q) = %q %q %q; net/http %q %q %q", raw, h.Method, h.Path, h.Query, req.Method, req.URL.Path, req.URL.RawQuery)
		}
		if req.ContentLength != h.ContentLength || req.Close != h.Close {
			t.Fatalf("parse(%q): length %d close %v; net/http %d %v", raw, h.ContentLength, h.Close, req.ContentLength, req.Close)
		}
		if req.Host != string(h.Get("Host")) {
			t.Fatalf("parse(%q): Host %q; net/http %q", raw, h.Get("Host"), req.Host)
		}
		// net/http's server also answers 400 to a malformed Host
		// (httpguts.ValidHostHeader): RFC 3986's host and port bytes.
		for _, c := range []byte(req.Host) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=:[]%", c) >= 0) {
				t.Fatalf("parse accepted %q: net/http's server refuses Host %q", raw, req.Host)
			}
		}
		if len(req.TransferEncoding) != 0 || req.Header.Get("Expect") != "" || req.Header.Get("Upgrade") != "" {
			t.Fatalf("parse accepted %q, which net/http frames or upgrades", raw)
		}
		for _, f := range h.fields {
			name := string(f.name)
			if equalFold(f.name, "host") {
				continue // net/http moves it to req.Host
			}
			vs := req.Header.Values(name)
			if len(vs) != h.Count(name) || vs[0] != string(h.Get(name)) {
				t.Fatalf("parse(%q): field %q = %q (×%d); net/http %q", raw, name, h.Get(name), h.Count(name), vs)
			}
		}
	})
}

func BenchmarkParse(b *testing.B) {
	raw := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: router.internal:8000\r\n" +
		"User-Agent: bench/1.0\r\nAccept: */*\r\nContent-Type: application/json\r\n" +
		"Authorization: Bearer sk-0123456789abcdef\r\nContent-Length: 97\r\n\r\n")
	var h Head
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if !h.parse(raw) {
			b.Fatal("declined")
		}
	}
}
