package mcp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestOriginPolicy(t *testing.T) {
	p, err := newOriginPolicy([]string{"https://ops.example:8443", " HTTP://Dash.Example "})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		origin, host string
		ok           bool
	}{
		{"", "10.0.0.5:6381", true}, // not a browser page
		{"http://localhost:3000", "127.0.0.1:6381", true},
		{"http://127.0.0.1:6274", "127.0.0.1:6381", true},
		{"http://[::1]:8080", "[::1]:6381", true},
		{"http://app.localhost", "127.0.0.1:6381", true},
		{"https://ops.example:8443", "10.0.0.5:6381", true},
		{"http://dash.example", "10.0.0.5:6381", true},
		{"http://dash.example:80", "10.0.0.5:6381", true},
		{"http://10.0.0.5:6381", "10.0.0.5:6381", true}, // the router's own page, by IP
		{"http://evil.example", "127.0.0.1:6381", false},
		{"http://evil.example:6381", "evil.example:6381", false}, // DNS rebinding: same "origin" by name
		{"https://ops.example", "10.0.0.5:6381", false},          // wrong port
		{"http://10.0.0.6:6381", "10.0.0.5:6381", false},
		{"https://10.0.0.5:6381", "10.0.0.5:6381", false}, // wrong scheme
		{"null", "127.0.0.1:6381", false},
		{"not a url", "127.0.0.1:6381", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://"+tc.host+"/mcp", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := p.allows(r); got != tc.ok {
			t.Errorf("Origin %q Host %q: allowed=%v, want %v", tc.origin, tc.host, got, tc.ok)
		}
	}
	if _, err := newOriginPolicy([]string{"ops.example"}); err == nil {
		t.Error("an origin without a scheme was accepted")
	}
}

// TestForeignOrigin403 checks the refusal on the real endpoint, for every
// method, before any session or era logic.
func TestForeignOrigin403(t *testing.T) {
	r := newRouter(t, Config{AllowedOrigins: []string{"https://ops.example"}})
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	do := func(method, origin string) *http.Response {
		t.Helper()
		var body *strings.Reader
		if method == http.MethodPost {
			body = strings.NewReader(initialize)
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, r.URL, body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Origin", origin)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete, http.MethodOptions} {
		if resp := do(m, "https://evil.example"); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with a foreign Origin: %d, want 403", m, resp.StatusCode)
		}
	}
	for _, o := range []string{"http://localhost:6274", "https://ops.example"} {
		if resp := do(http.MethodPost, o); resp.StatusCode != http.StatusOK {
			t.Errorf("initialize from %s: %d, want 200", o, resp.StatusCode)
		}
	}
}
