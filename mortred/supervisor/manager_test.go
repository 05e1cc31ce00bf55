package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mortred/config"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestChildEnvironment: each model server gets its own token and nothing of
// the gateway's (management and scrape tokens, listen overrides); the
// gateway gets what it needs; no token is on any command line.
func TestChildEnvironment(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mortred.toml"), "[supervisor]\napi_port = 18787\nlog_dir = \"logs\"\n[gateway]\nport = 18080\n")
	writeFile(t, filepath.Join(dir, "server", "a.toml"), "[A]\nport = 19001\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/a.toml\"\n")
	writeFile(t, filepath.Join(dir, "models", "a.toml"), "type = \"testmodel\"\n")
	cp, err := config.LoadControlPlane(filepath.Join(dir, "mortred.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := config.LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"MORTRED_API_TOKEN": "api-secret", "MORTRED_METRICS_TOKEN": "metrics-secret",
		"MORTRED_GATEWAY_AUTH_TOKEN": "gw-secret", "MORTRED_AUTH_TOKEN": "model-secret",
		"MORTRED_LISTEN_HOST": "127.0.0.2", "MORTRED_LISTEN_PORT": "18099",
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
	exe, _ := os.Executable()
	m, err := NewManager(cp, cat, envconf.OS(), Options{ServerBin: exe, GatewayBin: exe}, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	model, gw := m.Get("A").Child().spec, m.Get(GatewayID).Child().spec
	if !slices.Contains(model.Env, "MORTRED_AUTH_TOKEN=model-secret") || !slices.Contains(gw.Env, "MORTRED_AUTH_TOKEN=model-secret") {
		t.Fatal("a child lacks the model token")
	}
	for _, kv := range model.Env {
		for _, name := range []string{"MORTRED_API_TOKEN", "MORTRED_METRICS_TOKEN", "MORTRED_GATEWAY_AUTH_TOKEN", "MORTRED_LISTEN_HOST", "MORTRED_LISTEN_PORT"} {
			if strings.HasPrefix(kv, name+"=") {
				t.Errorf("model server inherits %s", kv)
			}
		}
	}
	for _, want := range []string{"MORTRED_API_TOKEN=api-secret", "MORTRED_METRICS_TOKEN=metrics-secret", "MORTRED_GATEWAY_AUTH_TOKEN=gw-secret", "MORTRED_LISTEN_PORT=18099"} {
		if !slices.Contains(gw.Env, want) {
			t.Errorf("gateway lacks %s", want)
		}
	}
	n := 0
	for _, kv := range gw.Env {
		if strings.HasPrefix(kv, "MORTRED_AUTH_TOKEN=") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("gateway has %d MORTRED_AUTH_TOKEN entries", n)
	}
	// The readiness probe and the UI relay follow the gateway's overrides.
	if gw.ReadyURL != "http://127.0.0.2:18099/healthz" || m.gatewayURL != "http://127.0.0.2:18099" {
		t.Errorf("gateway probed at %s (relay %s)", gw.ReadyURL, m.gatewayURL)
	}
	for _, s := range []Spec{model, gw} {
		for _, a := range s.Args {
			for _, v := range vars {
				if strings.Contains(a, v) && strings.Contains(v, "secret") {
					t.Errorf("%s has a token on its command line: %q", s.Name, a)
				}
			}
		}
	}
}

func TestNewManagerNeedsAPIToken(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mortred.toml"), "")
	writeFile(t, filepath.Join(dir, "server", "a.toml"), "[A]\nport = 19001\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/a.toml\"\n")
	writeFile(t, filepath.Join(dir, "models", "a.toml"), "type = \"testmodel\"\n")
	cp, err := config.LoadControlPlane(filepath.Join(dir, "mortred.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := config.LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	_, err = NewManager(cp, cat, envconf.Map(map[string]string{}), Options{ServerBin: exe, GatewayBin: exe}, logx.Discard())
	if err == nil || !strings.Contains(err.Error(), "MORTRED_API_TOKEN") {
		t.Fatalf("err %v", err)
	}
	_, err = NewManager(cp, cat, envconf.Map(map[string]string{"MORTRED_API_TOKEN": "x"}), Options{ServerBin: filepath.Join(dir, "nope"), GatewayBin: exe}, logx.Discard())
	if err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("missing binary: %v", err)
	}
}
