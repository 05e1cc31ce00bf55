package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// corsServer is CORS for two origins in front of a handler that answers
// 200 "served" and counts its calls.
func corsServer(t *testing.T) (*httptest.Server, *int) {
	t.Helper()
	calls := new(int)
	h, err := CORS([]string{"https://app.example", "http://localhost:3000/"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*calls++
		w.Header().Set("X-Request-Id", "r1")
		_, _ = w.Write([]byte("served"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, calls
}

func preflight(t *testing.T, url, origin string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodOptions, url+"/v1/chat/completions", nil)
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, x-stainless-retry-count")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestCORSPreflightListedOrigin(t *testing.T) {
	srv, calls := corsServer(t)
	for _, origin := range []string{"https://app.example", "http://localhost:3000"} {
		resp := preflight(t, srv.URL, origin)
		h := resp.Header
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("%s: preflight %d, want 204", origin, resp.StatusCode)
		}
		if got := h.Get("Access-Control-Allow-Origin"); got != origin {
			t.Errorf("%s: Access-Control-Allow-Origin %q, want the origin echoed", origin, got)
		}
		if got := h.Get("Access-Control-Allow-Credentials"); got != "true" {
			t.Errorf("%s: Access-Control-Allow-Credentials %q, want true", origin, got)
		}
		if m := h.Get("Access-Control-Allow-Methods"); !strings.Contains(m, "POST") {
			t.Errorf("%s: Access-Control-Allow-Methods %q lacks POST", origin, m)
		}
		if ah := strings.ToLower(h.Get("Access-Control-Allow-Headers")); !strings.Contains(ah, "authorization") || !strings.Contains(ah, "x-stainless-retry-count") {
			t.Errorf("%s: Access-Control-Allow-Headers %q lacks what was asked", origin, ah)
		}
		if h.Get("Access-Control-Max-Age") == "" {
			t.Errorf("%s: no Access-Control-Max-Age", origin)
		}
		for _, v := range h.Values("Access-Control-Allow-Origin") {
			if v == "*" {
				t.Errorf("%s: Access-Control-Allow-Origin *", origin)
			}
		}
	}
	if *calls != 0 {
		t.Errorf("a preflight reached the handler %d times (it must be answered before, without a key)", *calls)
	}
}

func TestCORSPreflightUnlistedOrigin(t *testing.T) {
	srv, calls := corsServer(t)
	for _, origin := range []string{"https://evil.example", "https://app.example:8443", "http://app.example", "null"} {
		resp := preflight(t, srv.URL, origin)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: preflight %d, want 403", origin, resp.StatusCode)
		}
		for name := range resp.Header {
			if strings.HasPrefix(strings.ToLower(name), "access-control-") {
				t.Errorf("%s: refused preflight carries %s: %q", origin, name, resp.Header.Get(name))
			}
		}
	}
	if *calls != 0 {
		t.Errorf("a refused preflight reached the handler %d times", *calls)
	}
}

func TestCORSPlainRequests(t *testing.T) {
	srv, calls := corsServer(t)
	do := func(origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	resp := do("https://app.example")
	if resp.StatusCode != 200 {
		t.Fatalf("POST from a listed origin: %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "https://app.example" {
		t.Errorf("Access-Control-Allow-Origin %q, want the origin", got)
	}
	if got := resp.Header.Get("Access-Control-Allow-Credentials"); got != "true" {
		t.Errorf("Access-Control-Allow-Credentials %q, want true", got)
	}
	exposed := strings.ToLower(resp.Header.Get("Access-Control-Expose-Headers"))
	for _, h := range []string{"retry-after", "retry-after-ms", "x-ratelimit-remaining-tokens", "x-request-id", "mcp-session-id"} {
		if !strings.Contains(exposed, h) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", exposed, h)
		}
	}
	if !strings.Contains(resp.Header.Get("Vary"), "Origin") {
		t.Errorf("Vary %q lacks Origin", resp.Header.Get("Vary"))
	}

	// Another origin's request and a request without Origin are served
	// without CORS headers (the browser keeps the answer from a foreign
	// page; the key check still applies behind).
	for _, origin := range []string{"https://evil.example", ""} {
		resp := do(origin)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("POST from %q: %d, Access-Control-Allow-Origin %q", origin, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	if *calls != 3 {
		t.Errorf("handler called %d times, want 3", *calls)
	}
}

// plain is a handler of its own type, to tell it from a wrapper.
type plain struct{}

func (plain) ServeHTTP(http.ResponseWriter, *http.Request) {}

func TestCORSNoOriginsIsHandlerItself(t *testing.T) {
	h, err := CORS(nil, plain{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.(plain); !ok {
		t.Fatalf("CORS(nil) = %T, want the handler itself (no wrapper, no cost)", h)
	}
	if h, _ := CORS([]string{"https://app.example"}, plain{}); h == nil {
		t.Fatal("CORS with an origin returned no handler")
	} else if _, ok := h.(plain); ok {
		t.Fatal("CORS with an origin returned the handler unwrapped")
	}
}

func TestCheckOrigins(t *testing.T) {
	for _, ok := range [][]string{nil, {"https://app.example"}, {"http://localhost:3000", "https://a.example:8443/"}, {"http://[::1]:8080"}} {
		if err := CheckOrigins(ok); err != nil {
			t.Errorf("CheckOrigins(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"*", "https://*.example", "https://app.example/path", "app.example", "ftp://app.example",
		"https://app.example?x=1", "https://user@app.example", "https://", "junk", ""} {
		err := CheckOrigins([]string{bad})
		if err == nil {
			t.Errorf("CheckOrigins(%q) accepted it", bad)
			continue
		}
		if !strings.Contains(err.Error(), "origin") {
			t.Errorf("CheckOrigins(%q) = %v: does not say what is wrong", bad, err)
		}
		if _, err := CORS([]string{bad}, http.NotFoundHandler()); err == nil {
			t.Errorf("CORS(%q) accepted it", bad)
		}
	}
}
