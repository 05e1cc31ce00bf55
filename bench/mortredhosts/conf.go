package mortredhosts

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// plane is a generated control-plane directory:
//
//	DIR/mortred.toml, DIR/server/<ID>.toml, DIR/models/<ID>.toml, DIR/logs/
type plane struct {
	dir, file string
	// host is where the supervisor's API and the gateway listen.
	host            string
	apiPort, gwPort int
}

// gatewayAddr is HOST:PORT of the gateway.
func (p plane) gatewayAddr() string { return net.JoinHostPort(p.host, strconv.Itoa(p.gwPort)) }

// apiAddr is HOST:PORT of the supervisor's API.
func (p plane) apiAddr() string { return net.JoinHostPort(p.host, strconv.Itoa(p.apiPort)) }

// model is one model server of a plane, on the loopback of wherever the
// plane runs.
type model struct {
	id   string
	port int
	// modelConf is the model config's absolute path; "" writes a
	// TESTMODEL one (no delay) into models/.
	modelConf string
	// keys override the model-server keys below.
	keys map[string]any
}

// uri is the model's legacy server_uri.
func (m model) uri() string { return "/mortred_ai_server_v1/classification/" + strings.ToLower(m.id) }

// writePlane writes a control plane for models with the supervisor's API
// and the gateway on host; gateway adds or overrides [gateway] keys.
func writePlane(dir, host string, apiPort, gwPort int, gateway map[string]any, models []model) (plane, error) {
	p := plane{dir: dir, file: filepath.Join(dir, "mortred.toml"), host: host, apiPort: apiPort, gwPort: gwPort}
	for _, sub := range []string{"server", "models", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return p, err
		}
	}
	gw := map[string]any{
		"host": host, "port": gwPort, "request_size_limit_mb": 64, "max_connections": 1024,
		"upstream_connect_timeout_ms": 2000, "upstream_response_timeout_ms": 60000, "upstream_idle_timeout_ms": 30000,
	}
	for k, v := range gateway {
		gw[k] = v
	}
	files := map[string]string{
		"mortred.toml": tomlText(map[string]any{"supervisor": map[string]any{
			"api_host": host, "api_port": apiPort, "autostart_default": true, "start_concurrency": 2,
			"log_dir": "logs", "log_rotate_mb": 10, "server_conf_dir": "server",
		}, "gateway": gw}),
	}
	for _, m := range models {
		keys := map[string]any{
			"host": "127.0.0.1", "port": m.port, "server_uri": m.uri(), "worker_nums": 2,
			"request_size_limit": 16, "auth_token": "", "rate_limit_qps": 0, "model_run_timeout": 30000,
			"max_queue_depth": 256, "max_batch_size": 1, "max_batch_delay_ms": 0, "max_request_items": 32,
			"async_enabled": true, "async_timeout": 300000, "async_max_queue": 64, "async_job_ttl": 600000,
			"async_max_completed": 1000, "model_config_file_path": m.modelConf,
		}
		if m.modelConf == "" {
			keys["model_config_file_path"] = "../models/" + m.id + ".toml"
			files["models/"+m.id+".toml"] = tomlText(map[string]any{"type": "testmodel", "name": m.id, "category": "classification",
				"version": "1", "batch_overhead_ms": 0, "load_delay_ms": 0})
		}
		for k, v := range m.keys {
			keys[k] = v
		}
		files["server/"+m.id+".toml"] = tomlText(map[string]any{m.id: keys})
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return p, err
		}
	}
	return p, nil
}

// serverFile is the model-server file of id.
func (p plane) serverFile(id string) string { return filepath.Join(p.dir, "server", id+".toml") }

// tomlText encodes v (tables of tables) as TOML.
func tomlText(v any) string {
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(v); err != nil {
		// Only maps of strings, numbers and booleans come here.
		panic(fmt.Sprintf("mortredhosts: encoding a configuration: %v", err))
	}
	return b.String()
}
