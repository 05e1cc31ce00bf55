package mcp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDispatchRule(t *testing.T) {
	d := &dispatcher{}
	const discover = `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}`
	const modernList = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`
	for _, tc := range []struct {
		name, method, version, session, body string
		stateless                            bool
	}{
		{"2026 header", "POST", "2026-07-28", "", initialize, true},
		{"later header", "POST", "2027-01-01", "", initialize, true},
		{"2025 header wins over body", "POST", "2025-11-25", "", discover, false},
		{"session", "POST", "", "abc", discover, false},
		{"GET", "GET", "", "", "", false},
		{"DELETE", "DELETE", "", "", "", false},
		{"discover body", "POST", "", "", discover, true},
		{"meta version body", "POST", "", "", modernList, true},
		{"initialize body", "POST", "", "", initialize, false},
		{"batch", "POST", "", "", "[" + discover + "]", false},
		{"garbage", "POST", "", "", "{not json", false},
		{"empty", "POST", "", "", "", false},
	} {
		r := httptest.NewRequest(tc.method, "/mcp", strings.NewReader(tc.body))
		if tc.version != "" {
			r.Header.Set("Mcp-Protocol-Version", tc.version)
		}
		if tc.session != "" {
			r.Header.Set("Mcp-Session-Id", tc.session)
		}
		if got := d.isStateless(r); got != tc.stateless {
			t.Errorf("%s: stateless=%v, want %v", tc.name, got, tc.stateless)
		}
		// Whatever was read to decide is there for the handler.
		if b, _ := io.ReadAll(r.Body); string(b) != tc.body {
			t.Errorf("%s: body after dispatch %q, want %q", tc.name, b, tc.body)
		}
	}
}

func TestDispatchOversizedBodyGoesStateful(t *testing.T) {
	body := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"x":"` + strings.Repeat("a", int(peekLimit)) + `"}}`
	r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	if (&dispatcher{}).isStateless(r) {
		t.Fatal("an oversized body was parsed")
	}
	if b, _ := io.ReadAll(r.Body); len(b) != len(body) {
		t.Fatalf("body cut to %d of %d bytes", len(b), len(body))
	}
}

func FuzzModernMessage(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"server/discover"}`))
	f.Add([]byte(`{"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`))
	f.Add([]byte(`[{"method":"server/discover"}]`))
	f.Add([]byte(`{"params":[1,2]}`))
	f.Add([]byte(`{"params":{"_meta":null}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		modern := modernMessage(body)
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(string(body)))
		if got := (&dispatcher{}).isStateless(r); got != modern {
			t.Fatalf("isStateless %v, modernMessage %v", got, modern)
		}
		if b, _ := io.ReadAll(r.Body); string(b) != string(body) {
			t.Fatal("body not restored")
		}
	})
}
