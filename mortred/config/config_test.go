package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/envconf"
)

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func modelDir(t *testing.T) string {
	dir := t.TempDir()
	write(t, dir, "models/m.toml", "type = \"testmodel\"\nname = \"M\"\ncategory = \"classification\"\n")
	return dir
}

func TestLoadServerDefaultsAndPaths(t *testing.T) {
	dir := modelDir(t)
	p := write(t, dir, "server/a.toml", "[A]\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/m.toml\"\n")
	s, err := LoadServer(p, envconf.Map(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "A" || s.Host != "127.0.0.1" || *s.Port != 9001 || s.WorkerNums != 1 || s.QueueDepth() != 256 ||
		s.MaxBatchSize != 1 || s.MaxRequestItems != 32 || s.ModelRunTimeout != 30000 || s.AsyncEnabled {
		t.Fatalf("defaults: %+v", s)
	}
	if s.ModelConfigFilePath != filepath.Join(dir, "models/m.toml") || s.ModelType != "testmodel" || s.ModelCategory != "classification" {
		t.Fatalf("model path %q type %q", s.ModelConfigFilePath, s.ModelType)
	}
}

func TestLoadServerShippedTestmodel(t *testing.T) {
	s, err := LoadServer("../../conf/server/testmodel.toml", envconf.Map(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "TESTMODEL" || s.ModelType != "testmodel" {
		t.Fatalf("%+v", s)
	}
}

func TestLoadServerEnvOverrides(t *testing.T) {
	dir := modelDir(t)
	p := write(t, dir, "a.toml", "[A]\nserver_uri = \"/a\"\nmodel_config_file_path = \"models/m.toml\"\nauth_token = \"file\"\n")
	s, err := LoadServer(p, envconf.Map(map[string]string{
		EnvListenHost: "0.0.0.0", EnvListenPort: "0", EnvAuthToken: "env", EnvExpose: "docker",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Host != "0.0.0.0" || *s.Port != 0 || s.AuthToken != "env" || s.Expose != "docker" {
		t.Fatalf("%+v", s)
	}
}

func TestLoadServerErrors(t *testing.T) {
	dir := modelDir(t)
	base := "server_uri = \"/a\"\nmodel_config_file_path = \"models/m.toml\"\n"
	tests := []struct {
		name, body string
		env        map[string]string
		want       string
	}{
		{"two sections", "[A]\n" + base + "[B]\nport = 1\n", nil, "exactly one section"},
		{"unknown key", "[A]\n" + base + "colour = 1\n", nil, "unknown keys"},
		{"wrong type", "[A]\n" + base + "worker_nums = \"two\"\n", nil, "worker_nums"},
		{"no model config", "[A]\nserver_uri = \"/a\"\n", nil, "model_config_file_path is required"},
		{"missing model file", "[A]\nserver_uri = \"/a\"\nmodel_config_file_path = \"nope.toml\"\n", nil, "nope.toml"},
		{"bad uri", "[A]\nserver_uri = \"a\"\nmodel_config_file_path = \"models/m.toml\"\n", nil, "server_uri"},
		{"reserved uri", "[A]\nserver_uri = \"/metrics\"\nmodel_config_file_path = \"models/m.toml\"\n", nil, "collides"},
		{"negative workers", "[A]\n" + base + "worker_nums = -1\n", nil, "worker_nums"},
		{"negative qps", "[A]\n" + base + "rate_limit_qps = -1.0\n", nil, "rate_limit_qps"},
		{"bad port", "[A]\n" + base + "port = 70000\n", nil, "port"},
		{"bad env port", "[A]\n" + base, map[string]string{EnvListenPort: "http"}, "MORTRED_LISTEN_PORT"},
		{"bad expose", "[A]\n" + base, map[string]string{EnvExpose: "yes"}, "MORTRED_EXPOSE"},
		{"wildcard refused", "[A]\n" + base + "host = \"0.0.0.0\"\nauth_token = \"t\"\n", nil, "wildcard"},
		{"wildcard v6 refused", "[A]\n" + base + "host = \"::\"\nauth_token = \"t\"\n", nil, "wildcard"},
		{"non-loopback without token", "[A]\n" + base + "host = \"10.1.2.3\"\n", nil, "without auth_token"},
		{"exposed wildcard without token", "[A]\n" + base + "host = \"0.0.0.0\"\n", map[string]string{EnvExpose: "docker"}, "without auth_token"},
		{"missing ort lib", "[A]\n" + base + "ort_lib_path = \"nope.so\"\n", nil, "ort_lib_path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, dir, "x.toml", tt.body)
			_, err := LoadServer(p, envconf.Map(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCheckListen(t *testing.T) {
	ok := []struct {
		host   string
		token  bool
		expose string
	}{
		{"127.0.0.1", false, ""}, {"localhost", false, ""}, {"::1", false, ""}, {"[::1]", false, ""},
		{"10.0.0.1", true, ""}, {"0.0.0.0", true, "docker"}, {"::", true, "unsafe"},
	}
	for _, c := range ok {
		if err := CheckListen(c.host, c.token, c.expose); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestCatalog(t *testing.T) {
	dir := modelDir(t)
	srv := filepath.Join(dir, "server")
	write(t, srv, "a.toml", "[A]\nport = 9001\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/m.toml\"\n")
	write(t, srv, "b.toml", "[B]\nport = 9002\nserver_uri = \"/b\"\nmodel_config_file_path = \"../models/m.toml\"\n")
	c, err := LoadCatalog(srv)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.IDs(), ",") != "A,B" || c.ByURI("/b").ID != "B" || c.ByID("A").Port != 9001 || c.ByID("A").Name != "M" || c.ByID("A").Category != "classification" {
		t.Fatalf("%+v", c.Entries)
	}

	for _, tt := range []struct{ name, body, want string }{
		{"dup id", "[A]\nport = 9003\nserver_uri = \"/c\"\nmodel_config_file_path = \"../models/m.toml\"\n", "duplicate catalog id [A]"},
		{"dup port", "[C]\nport = 9002\nserver_uri = \"/c\"\nmodel_config_file_path = \"../models/m.toml\"\n", "duplicate port 9002"},
		{"dup uri", "[C]\nport = 9003\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/m.toml\"\n", "duplicate server_uri /a"},
		{"port zero", "[C]\nport = 0\nserver_uri = \"/c\"\nmodel_config_file_path = \"../models/m.toml\"\n", "fixed port"},
		{"broken file", "[C\n", "c.toml"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, srv, "c.toml", tt.body)
			defer os.Remove(p)
			_, err := LoadCatalog(srv)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := LoadCatalog(t.TempDir()); err == nil {
		t.Fatal("empty catalog accepted")
	}
}

func TestShippedCatalog(t *testing.T) {
	c, err := LoadCatalog("../../conf/server")
	if err != nil {
		t.Fatal(err)
	}
	if c.ByID("TESTMODEL") == nil {
		t.Fatalf("TESTMODEL missing from %v", c.IDs())
	}
}

func TestControlPlane(t *testing.T) {
	dir := modelDir(t)
	write(t, dir, "server/a.toml", "[A]\nport = 9001\nserver_uri = \"/a\"\nmodel_config_file_path = \"../models/m.toml\"\n")
	p := write(t, dir, "mortred.toml", `
[supervisor]
autostart_default = false
[gateway]
port = 8081
[servers.A]
restart_policy = "always"
`)
	cp, err := LoadControlPlane(p)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Supervisor.APIPort != 8787 || cp.Supervisor.ServerConfDir != filepath.Join(dir, "server") || cp.Gateway.Port != 8081 ||
		cp.Gateway.RequestSizeLimitMB != 64 || *cp.Policy("A").Autostart || cp.Policy("A").RestartPolicy != RestartAlways ||
		!*cp.Policy("Z").Enabled || cp.Policy("Z").RestartPolicy != RestartOnFailure {
		t.Fatalf("%+v", cp)
	}
	c, err := LoadCatalog(cp.Supervisor.ServerConfDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.CheckCatalog(c); err != nil {
		t.Fatal(err)
	}
	cp.Servers["GHOST"] = cp.Policy("GHOST")
	cp.Gateway.Port = 9001
	err = cp.CheckCatalog(c)
	if err == nil || !strings.Contains(err.Error(), "[servers.GHOST]") || !strings.Contains(err.Error(), "gateway's port") {
		t.Fatalf("CheckCatalog: %v", err)
	}

	for _, tt := range []struct{ name, body, want string }{
		{"bad policy", "[servers.A]\nrestart_policy = \"sometimes\"\n", "restart_policy"},
		{"unknown key", "[gateway]\nprot = 1\n", "unknown keys"},
		{"same port", "[gateway]\nport = 8787\n", "api_port"},
		{"wildcard origin", "[gateway]\ncors_origins = [\"*\"]\n", "[gateway] cors_origins: CORS origin \"*\": wildcards are not allowed"},
		{"origin with a path", "[gateway]\ncors_origins = [\"https://app.example/x\"]\n", "is not an origin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadControlPlane(write(t, dir, "bad.toml", tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestGatewayKeysFile: keys_file is taken from the control-plane file's
// directory like the other paths, an absolute one as written, and listed
// origins load as written.
func TestGatewayKeysFile(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"[gateway]\n": "",
		"[gateway]\nkeys_file = \"keys/gateway.toml\"\ncors_origins = [\"https://app.example\", \"http://localhost:3000\"]\n": filepath.Join(dir, "keys", "gateway.toml"),
		"[gateway]\nkeys_file = \"/etc/mortred/keys.toml\"\n":                                                                 "/etc/mortred/keys.toml",
	} {
		cp, err := LoadControlPlane(write(t, dir, "mortred.toml", body))
		if err != nil {
			t.Fatal(err)
		}
		if cp.Gateway.KeysFile != want {
			t.Errorf("%q: keys_file %q, want %q", body, cp.Gateway.KeysFile, want)
		}
		if want != "" && strings.Contains(body, "cors") && len(cp.Gateway.CORSOrigins) != 2 {
			t.Errorf("cors_origins %v", cp.Gateway.CORSOrigins)
		}
	}
}

func TestMissingFilesSayWhatToPass(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadControlPlane(filepath.Join(dir, "conf/mortred.toml")); err == nil || !strings.Contains(err.Error(), "not found: run from the checkout (it has conf/mortred.toml) or pass --config PATH") {
		t.Errorf("missing control-plane file: %v", err)
	}
	if _, err := LoadServer(filepath.Join(dir, "nope.toml"), envconf.Map(nil)); err == nil || !strings.Contains(err.Error(), "not found: pass --config with one of conf/server/*.toml") {
		t.Errorf("missing model-server file: %v", err)
	}
}
