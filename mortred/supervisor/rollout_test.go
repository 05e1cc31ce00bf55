package supervisor

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mortred/config"
)

// rolloutManager is a manager over one model A whose model config has a
// model_dir and a dict_file relative to its own directory.
func rolloutManager(t *testing.T, modelConf string) (*Manager, string) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mortred.toml"), "[supervisor]\napi_port = 18787\nlog_dir = \"logs\"\n[gateway]\nport = 18080\n")
	writeFile(t, filepath.Join(dir, "server", "a.toml"), "[A]\nport = 19001\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/a.toml\"\n")
	writeFile(t, filepath.Join(dir, "models", "a.toml"), modelConf)
	cp, err := config.LoadControlPlane(filepath.Join(dir, "mortred.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := config.LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	m, err := NewManager(cp, cat, envconf.Map(map[string]string{"MORTRED_API_TOKEN": "api"}), Options{ServerBin: exe, GatewayBin: exe}, logx.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return m, dir
}

// TestRolloutPrepare: the new version's files keep every path the old
// config meant (relative ones made absolute), run on a port of their own,
// and name the version as the manual says.
func TestRolloutPrepare(t *testing.T) {
	m, dir := rolloutManager(t, "type = \"testmodel\"\nversion = \"1\"\nmodel_dir = \"../store\"\nmodel_file = \"m.onnx\"\n")
	x := m.Get("A")
	if x.current().version != "1" {
		t.Fatalf("the catalog's version: %q", x.current().version)
	}
	onnx := filepath.Join(dir, "new.onnx")
	writeFile(t, onnx, "graph bytes")
	sum, _ := fileSHA256(onnx)

	file, version, err := m.prepare(x, x.current(), RolloutRequest{ModelFile: onnx}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if version != "1+"+sum[:8] {
		t.Errorf("version %q, want 1+%s", version, sum[:8])
	}
	srv, err := config.LoadServer(file, envconf.Map(nil))
	if err != nil {
		t.Fatalf("the new server file does not load: %v", err)
	}
	if *srv.Port == 19001 || *srv.Port == 0 || srv.ServerURI != "/a" {
		t.Errorf("new server file: port %d uri %q; want another port, the same uri", *srv.Port, srv.ServerURI)
	}
	var mc map[string]any
	if _, err := toml.DecodeFile(srv.ModelConfigFilePath, &mc); err != nil {
		t.Fatal(err)
	}
	if mc["model_file"] != onnx || mc["model_dir"] != filepath.Join(dir, "store") || mc["version"] != version || mc["type"] != "testmodel" {
		t.Errorf("new model config %v", mc)
	}

	// A version named on the command line wins; a config file brings its own.
	if _, v, err := m.prepare(x, x.current(), RolloutRequest{ModelFile: onnx, Version: "v9"}, 2); err != nil || v != "v9" {
		t.Errorf("--version: %q %v", v, err)
	}
	other := filepath.Join(dir, "other.toml")
	writeFile(t, other, "type = \"testmodel\"\nversion = \"7\"\n")
	file, v, err := m.prepare(x, x.current(), RolloutRequest{Config: other}, 3)
	if err != nil || v != "7" {
		t.Fatalf("--config: %q %v", v, err)
	}
	if srv, err := config.LoadServer(file, envconf.Map(nil)); err != nil || srv.ModelConfigFilePath != other {
		t.Errorf("--config server file: %v %v", srv, err)
	}
	if _, _, err := m.prepare(x, x.current(), RolloutRequest{Config: other, Version: "8"}, 4); err == nil || !strings.Contains(err.Error(), `says version "7"`) {
		t.Errorf("a config with another version than asked: %v", err)
	}
	if _, _, err := m.prepare(x, x.current(), RolloutRequest{ModelFile: filepath.Join(dir, "missing.onnx")}, 5); err == nil {
		t.Error("a missing model file was accepted")
	}
}

// TestRolloutRefusals: what the API refuses before starting anything.
func TestRolloutRefusals(t *testing.T) {
	m, _ := rolloutManager(t, "type = \"testmodel\"\n")
	ctx := context.Background()
	for _, c := range []struct {
		name string
		run  func() error
		code int
		want string
	}{
		{"both files", func() error { _, err := m.Rollout(ctx, "A", RolloutRequest{ModelFile: "a", Config: "b"}); return err }, http.StatusBadRequest, "not both"},
		{"unknown id", func() error { _, err := m.Rollout(ctx, "NOPE", RolloutRequest{}); return err }, http.StatusNotFound, "no model server"},
		{"the gateway", func() error { _, err := m.Rollout(ctx, GatewayID, RolloutRequest{}); return err }, http.StatusNotFound, "no model server"},
		{"nothing to roll back to", func() error { _, err := m.Rollback(ctx, "A"); return err }, http.StatusConflict, "no previous version"},
	} {
		err := c.run()
		var re *RolloutError
		if !errors.As(err, &re) || re.Code != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %d %q", c.name, err, c.code, c.want)
		}
	}
}
