package app

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/serve"
)

// Two whole routers with one MENTAT_SESSION_KEY_FILE: a session opened on
// one is served by the other; a key file that cannot be used stops New.
func TestMCPSessionKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "session.key")
	os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))+"\n"), 0o600)
	env := map[string]string{"MENTAT_SESSION_KEY_FILE": path}
	a, b := startAppWith(t, env), startAppWith(t, env)

	post := func(base, id, body string) (*http.Response, string) {
		t.Helper()
		resp := mcpDo(t, base, http.MethodPost, id, "2025-11-25", body)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, _ := post(a, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize on A: %d %q", resp.StatusCode, id)
	}
	if resp, body := post(b, id, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); resp.StatusCode != http.StatusOK || !strings.Contains(body, "serve_status") {
		t.Fatalf("tools/list on B with A's session: %d %s", resp.StatusCode, body)
	}
	other := startApp(t) // no key file: a random key of its own
	if resp, body := post(other, id, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a router with another key: %d %s", resp.StatusCode, body)
	}

	for name, content := range map[string]string{"short": base64.StdEncoding.EncodeToString([]byte("short")), "not base64": "!!!"} {
		os.WriteFile(path, []byte(content), 0o600)
		cfg, _ := serve.LoadConfig(envconf.Map(env))
		cfg.HTTPAddr, cfg.Daemons, cfg.AnnouncePort, cfg.AnnounceAddr = "127.0.0.1:0", []string{}, 0, ""
		if _, err := New(cfg, logx.Discard()); err == nil || !strings.Contains(err.Error(), "MENTAT_SESSION_KEY_FILE: "+path+": line 1") {
			t.Errorf("New with a %s session key: %v", name, err)
		}
	}
	cfg, _ := serve.LoadConfig(envconf.Map(map[string]string{"MENTAT_SESSION_KEY_FILE": filepath.Join(dir, "missing")}))
	cfg.HTTPAddr, cfg.Daemons, cfg.AnnouncePort, cfg.AnnounceAddr = "127.0.0.1:0", []string{}, 0, ""
	if _, err := New(cfg, logx.Discard()); err == nil || !strings.Contains(err.Error(), "MENTAT_SESSION_KEY_FILE: cannot read") {
		t.Errorf("New with a missing session key file: %v", err)
	}
}
