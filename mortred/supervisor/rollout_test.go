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
	return managerAt(t, dir), dir
}

// managerAt is a manager of the control plane in dir.
func managerAt(t *testing.T, dir string) *Manager {
	t.Helper()
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
	return m
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

// TestRolloutRestored: a supervisor that restarts serves the version a
// rollout left in service (on a fresh port), keeps the one before it for
// rollback, and routes the gateway to it from the start.
func TestRolloutRestored(t *testing.T) {
	m, dir := rolloutManager(t, "type = \"testmodel\"\nversion = \"1\"\n")
	x := m.Get("A")
	file, version, err := m.prepare(x, x.current(), RolloutRequest{Version: "2"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// What a switch leaves behind, without running processes.
	x.mu.Lock()
	x.prev, x.cur = x.cur, &instance{child: x.cur.child, host: "127.0.0.1", port: 1, version: version, gen: 1, conf: file}
	x.mu.Unlock()
	if err := m.writeRoutes(); err != nil {
		t.Fatal(err)
	}

	again := managerAt(t, dir)
	y := again.Get("A")
	cur, prev := y.current(), y.prev
	if cur.version != "2" || cur.gen != 1 || cur.port == 1 || cur.port == 19001 || prev == nil || prev.version != "1" || prev.gen != 0 {
		t.Fatalf("restored: %+v, prev %+v; want version 2, instance 1 on a fresh port, prev version 1", cur, prev)
	}
	if args := cur.child.spec.Args; len(args) != 2 || args[1] != cur.conf {
		t.Errorf("the restored child runs %v, want --config %s", args, cur.conf)
	}
	routes, err := os.ReadFile(again.routesFile)
	if err != nil || !strings.Contains(string(routes), `"instance": 1`) || !strings.Contains(string(routes), cur.addr()) {
		t.Errorf("routes at start: %s %v", routes, err)
	}

	// A state file that does not parse: the catalog's version serves.
	writeFile(t, filepath.Join(dir, "run", "state.json"), "{")
	if z := managerAt(t, dir).Get("A").current(); z.gen != 0 || z.port != 19001 {
		t.Errorf("with a broken state file: %+v, want the catalog's", z)
	}
}
