package serve

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// testMux has the router's patterns (serve.New and app.New), each handler
// answering its pattern.
func testMux() *mux {
	x := newMux()
	for _, p := range []string{"GET /v1/models", "GET /v1/models/{id...}", "GET /status.json", "GET /healthz",
		"/", "/mcp", "GET /stats.json", "GET /stats/series.json", "POST /v1/responses/input_tokens", "GET /metrics"} {
		x.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, p) }))
	}
	return x
}

// served is what h answers to raw, a request head as a client sent it
// (parsed as the server parses it); ok is false when it does not parse.
func served(t testing.TB, h http.Handler, raw string) (code int, body string, ok bool) {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		return 0, "", false
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code, rec.Body.String(), true
}

// checkSame fails unless the shortcut mux and the plain ServeMux answer
// raw alike, and reports whether the shortcut was taken.
func checkSame(t testing.TB, x *mux, raw string) (shortcut, ok bool) {
	t.Helper()
	code, body, ok := served(t, x, raw)
	if !ok {
		return false, false
	}
	wantCode, wantBody, _ := served(t, x.m, raw)
	if code != wantCode || body != wantBody {
		t.Fatalf("%q: shortcut mux answered %d %q, ServeMux %d %q", raw, code, body, wantCode, wantBody)
	}
	r, _ := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	return x.shortcut(r), true
}

func TestMuxShortcutMatchesServeMux(t *testing.T) {
	x := testMux()
	cases := []struct {
		target   string
		method   string
		shortcut bool
	}{
		{"/v1/chat/completions", "POST", true},
		{"/v1/completions?x=1", "POST", true},
		{"/tokenize", "POST", true},
		{"/v1/models", "POST", true}, // only GET has a pattern: "/" takes the POST
		{"/v1/chat/", "POST", true},
		{"/", "POST", true},
		{"/mcp", "POST", false},
		{"/v1/responses/input_tokens", "POST", false},
		{"/v1//chat/completions", "POST", false}, // the ServeMux redirects
		{"/v1/./chat", "POST", false},
		{"/v1/../mcp", "POST", false},
		{"/v1/chat/..", "POST", false},
		{"/m%63p", "POST", false}, // escapes: the ServeMux decides
		{"/v1/a%2Fb", "POST", false},
		{"http://h/v1/chat/completions", "POST", true},
		{"*", "POST", false},
		{"/v1/chat/completions", "GET", false},
		{"/v1/chat/completions", "PUT", false},
	}
	for _, c := range cases {
		raw := c.method + " " + c.target + " HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"
		got, ok := checkSame(t, x, raw)
		if !ok {
			t.Fatalf("%q does not parse", raw)
		}
		if got != c.shortcut {
			t.Errorf("%s %s: shortcut %v, want %v", c.method, c.target, got, c.shortcut)
		}
	}
}

// TestMuxShortcutOff: a pattern the shortcut cannot reason about turns
// it off, and the ServeMux routes everything.
func TestMuxShortcutOff(t *testing.T) {
	for _, p := range []string{"POST /v1/{name}", "/v1/", "example.com/", "POST /a%20b"} {
		x := testMux()
		x.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, p) }))
		if sc, _ := checkSame(t, x, "POST /v1/chat HTTP/1.1\r\nHost: example.com\r\n\r\n"); sc {
			t.Errorf("after %q the shortcut is still taken", p)
		}
	}
}

func FuzzMuxShortcut(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/mcp", "//x", "/a/./b", "/a/../mcp", "/%6dcp", "/v1/models/x", "*", "/mcp/", "/v1/chat/?q"} {
		f.Add("POST", s)
	}
	x := testMux()
	f.Fuzz(func(t *testing.T, method, target string) {
		checkSame(t, x, method+" "+target+" HTTP/1.1\r\nHost: h\r\n\r\n")
	})
}

// BenchmarkMuxProxyPOST: a proxied POST through the shortcut and, for
// comparison, through the plain ServeMux.
func BenchmarkMuxProxyPOST(b *testing.B) {
	x := testMux()
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"shortcut", x}, {"servemux", x.m}} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			w := discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				c.h.ServeHTTP(w, r)
			}
		})
	}
}

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}
