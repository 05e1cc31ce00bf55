package auth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/keys"
)

// fake accepts "Bearer good" as key k and refuses anything else.
type fake struct {
	k     *keys.Key
	calls int
	addr  string
}

func (f *fake) Authenticate(h http.Header, addr string) (*keys.Key, *keys.Rejection) {
	f.calls++
	f.addr = addr
	if h.Get("Authorization") == "Bearer good" {
		return f.k, nil
	}
	return nil, &keys.Rejection{Status: http.StatusUnauthorized, Reason: keys.InvalidKey, Message: "key not known; send a key of this router"}
}

func TestMiddleware(t *testing.T) {
	f := &fake{k: &keys.Key{ID: "k"}}
	var got *keys.Key
	h := Middleware(f)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = keys.FromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	}))
	serve := func(method, path, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "[2001:db8::1]:5555"
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		got = nil
		h.ServeHTTP(w, r)
		return w
	}
	for _, p := range []string{"/", "/status.json", "/stats.json", "/stats/series.json", "/metrics", "/healthz", "/livez", "/readyz"} {
		for _, m := range []string{"GET", "HEAD"} {
			if w := serve(m, p, ""); w.Code != http.StatusNoContent || got != nil {
				t.Errorf("%s %s without a key: %d", m, p, w.Code)
			}
		}
	}
	if f.calls != 0 {
		t.Fatalf("an open path was authenticated %d times", f.calls)
	}
	for _, c := range [][2]string{{"GET", "/v1/models"}, {"POST", "/v1/chat/completions"}, {"POST", "/tokenize"}, {"POST", "/"},
		{"POST", "/healthz"}, {"POST", "/readyz"}, {"GET", "/mcp"}, {"DELETE", "/mcp"}, {"GET", "/nope"}, {"GET", "/status.json/"}, {"OPTIONS", "/v1/models"}} {
		if w := serve(c[0], c[1], "Bearer good"); w.Code != http.StatusNoContent || got != f.k {
			t.Errorf("%s %s with a key: %d, key %v", c[0], c[1], w.Code, got)
		}
	}
	if f.addr != "2001:db8::1" {
		t.Fatalf("client address %q", f.addr)
	}
	w := serve("POST", "/v1/chat/completions", "Bearer bad")
	if w.Code != 401 || got != nil || !strings.Contains(w.Body.String(), `"code":"invalid_api_key"`) ||
		!strings.Contains(w.Body.String(), `"type":"invalid_request_error"`) || !strings.Contains(w.Body.String(), "key not known") {
		t.Fatalf("a bad key: %d %s", w.Code, w.Body)
	}
}

func TestClientIP(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.1:80": "10.0.0.1", "[::1]:1": "::1", "odd": "odd"} {
		if got := ClientIP(in); got != want {
			t.Errorf("ClientIP(%q) = %q", in, got)
		}
	}
}
