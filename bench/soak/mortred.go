package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fe64bb06/frontdoor/bench/internal/harness"
)

// The mortred half: the supervisor (API and UI), its gateway and three
// model servers — the PP-OCR pipeline and the nsfwjs classifier on ONNX
// Runtime with the real models, and the built-in TESTMODEL for batches —
// with the supervisor's child logs on the small disk the disk-full fault
// fills.
const (
	ModelOCR  = "PPOCR"
	ModelNSFW = "NSFW_MOBILENETV2"
	ModelTest = "TESTMODEL"
	// GatewayBodyLimitMB is the gateway's request_size_limit_mb; the bad
	// traffic sends a body just over it.
	GatewayBodyLimitMB = 2
	apiToken           = "soak-api-token-0123456789abcdef"
	metricsToken       = "soak-metrics-token-0123456789abcdef"
	modelToken         = "soak-model-token-0123456789abcdef"
)

var mortredModels = []struct{ id, file string }{
	{ModelOCR, "ppocr.toml"}, {ModelNSFW, "nsfw_mobilenet_v2.toml"}, {ModelTest, "testmodel.toml"},
}

type mortred struct {
	sup     *service
	gwPort  int
	apiPort int
}

func (m *mortred) gateway() string { return "http://127.0.0.1:" + strconv.Itoa(m.gwPort) }
func (m *mortred) api() string     { return "http://127.0.0.1:" + strconv.Itoa(m.apiPort) }

// startMortred writes a control plane under dir from the repository's
// conf/ files (ports changed, one worker each) and starts the supervisor.
func startMortred(ctx context.Context, t topo) (m *mortred, err error) {
	m = &mortred{}
	defer func() {
		if err != nil {
			m.stop()
		}
	}()
	ports, err := freePorts(2 + len(mortredModels))
	if err != nil {
		return m, err
	}
	m.apiPort, m.gwPort = ports[0], ports[1]
	dir := filepath.Join(t.dir, "mortred")
	if err := os.MkdirAll(filepath.Join(dir, "server"), 0o755); err != nil {
		return m, err
	}
	sup := map[string]any{
		"api_host": "127.0.0.1", "api_port": m.apiPort, "autostart_default": true, "start_concurrency": 2,
		"log_dir": filepath.Join(t.diskDir, "mortred"), "run_dir": filepath.Join(dir, "run"), "log_rotate_mb": 1, "server_conf_dir": "server",
	}
	gw := map[string]any{
		"host": "127.0.0.1", "port": m.gwPort, "request_size_limit_mb": GatewayBodyLimitMB, "max_connections": 1024,
		"upstream_connect_timeout_ms": 2000, "upstream_response_timeout_ms": 60000, "upstream_idle_timeout_ms": 30000,
		"read_header_timeout_ms": 5000, "body_timeout_ms": BodyTimeout.Milliseconds(), "drain_ms": 1000, "shutdown_timeout_ms": 20000,
	}
	for i, mm := range mortredModels {
		var conf map[string]map[string]any
		src := filepath.Join(t.root, "conf", "server", mm.file)
		if _, err := toml.DecodeFile(src, &conf); err != nil {
			return m, fmt.Errorf("%s: %w", src, err)
		}
		keys, ok := conf[mm.id]
		if !ok {
			return m, fmt.Errorf("%s has no [%s] section", src, mm.id)
		}
		modelConf := keys["model_config_file_path"].(string)
		keys["model_config_file_path"] = filepath.Join(t.root, "conf", "server", modelConf)
		keys["port"], keys["worker_nums"], keys["auth_token"] = ports[2+i], 1, ""
		keys["max_batch_size"], keys["model_run_timeout"] = 1, 30000
		if err := writeTOML(filepath.Join(dir, "server", mm.id+".toml"), map[string]any{mm.id: keys}); err != nil {
			return m, err
		}
	}
	if err := writeTOML(filepath.Join(dir, "mortred.toml"), map[string]any{"supervisor": sup, "gateway": gw,
		"servers": map[string]any{ModelTest: map[string]any{"autostart": true}}}); err != nil {
		return m, err
	}
	m.sup = &service{name: "supervisor", logDir: t.logDir, spec: harness.Spec{Bin: filepath.Join(t.binDir, "mortred-supervisor"),
		Args: []string{"--config", filepath.Join(dir, "mortred.toml")}, Env: mortredEnv(t.env)}}
	if err := m.sup.start(); err != nil {
		return m, err
	}
	return m, m.waitReady(ctx, 3*time.Minute)
}

// mortredEnv is the supervisor's environment: the tokens, and no MORTRED*
// setting of the caller's shell but where ONNX Runtime and the models are.
func mortredEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MORTRED") && k != "MORTRED_ORT_LIB" && k != "MORTRED_MODEL_DIR" {
			env = append(env, k+"=")
		}
	}
	return append(append(env, "MORTRED_API_TOKEN="+apiToken, "MORTRED_METRICS_TOKEN="+metricsToken,
		"MORTRED_AUTH_TOKEN="+modelToken), extra...)
}

// waitReady waits until the gateway is ready with every model.
func (m *mortred) waitReady(ctx context.Context, timeout time.Duration) error {
	return harness.Eventually(ctx, timeout, "mortred gateway ready with every model", func() error {
		for _, mm := range mortredModels {
			if err := getOK(ctx, m.gateway()+"/readyz?model="+mm.id); err != nil {
				return err
			}
		}
		return nil
	}, m.sup.current())
}

// status is the supervisor's view of its children.
type childStatus struct {
	Gateway struct {
		PID int `json:"pid"`
	} `json:"gateway"`
	Servers []struct {
		ID    string `json:"id"`
		PID   int    `json:"pid"`
		Port  int    `json:"port"`
		State string `json:"state"`
	} `json:"servers"`
}

func (m *mortred) status(ctx context.Context) (childStatus, error) {
	var st childStatus
	req := m.api() + "/api/v1/status"
	err := getAuthJSON(ctx, req, apiToken, &st)
	return st, err
}

// pidOf is the pid of the gateway ("gateway") or a model server (its id)
// as the supervisor reports it; 0 when unknown.
func (m *mortred) pidOf(ctx context.Context, name string) int {
	st, err := m.status(ctx)
	if err != nil {
		return 0
	}
	if name == "gateway" {
		return st.Gateway.PID
	}
	for _, s := range st.Servers {
		if s.ID == name {
			return s.PID
		}
	}
	return 0
}

func (m *mortred) stop() {
	if m.sup != nil {
		m.sup.stop()
	}
}

func writeTOML(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := toml.NewEncoder(f).Encode(v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
