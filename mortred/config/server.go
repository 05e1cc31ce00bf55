// Package config reads mortred's TOML files: the model-server file (one per
// model), the control-plane file conf/mortred.toml, and the catalog built
// from every model-server file in a directory.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/mortred/deps"
)

// Server is one model-server file: a single top-level section whose name is
// the catalog id, e.g. [TESTMODEL]. Every field's comment gives its default.
type Server struct {
	// ID is the section name (the catalog id).
	ID string `toml:"-"`
	// File is the absolute path the config was read from.
	File string `toml:"-"`

	// Host to listen on; default 127.0.0.1.
	Host string `toml:"host"`
	// Port to listen on; default 9001. 0 picks a free port (tests only; the
	// catalog refuses it).
	Port *int `toml:"port"`
	// ServerURI is the inference path, e.g. /mortred_ai_server_v1/classification/x. Required.
	ServerURI string `toml:"server_uri"`
	// WorkerNums model instances run concurrently; default 1.
	WorkerNums int `toml:"worker_nums"`
	// RequestSizeLimit in MB; default 32. An explicit Content-Length above it → 413.
	RequestSizeLimit int `toml:"request_size_limit"`
	// AuthToken is the Bearer token for inference, jobs and /metrics. Empty
	// means those answer 401.
	AuthToken string `toml:"auth_token"`
	// RateLimitQPS per client IP after auth; 0 (default) = no limit.
	RateLimitQPS float64 `toml:"rate_limit_qps"`
	// ModelRunTimeout in ms is the request deadline; default 30000.
	ModelRunTimeout int `toml:"model_run_timeout"`
	// MaxQueueDepth bounds items waiting for a worker; default 256, 0 = unlimited.
	MaxQueueDepth *int `toml:"max_queue_depth"`
	// MaxBatchSize items per model run; default 1 (batching off).
	MaxBatchSize int `toml:"max_batch_size"`
	// MaxBatchDelayMS a worker waits to fill a batch; default 5 (only with batching).
	MaxBatchDelayMS *int `toml:"max_batch_delay_ms"`
	// MaxRequestItems images per request; default 32. More → 413 (status 67).
	MaxRequestItems int `toml:"max_request_items"`
	// AsyncEnabled turns on /jobs; default false (the routes answer 404).
	AsyncEnabled bool `toml:"async_enabled"`
	// AsyncTimeout in ms is a job's deadline; default 300000.
	AsyncTimeout int `toml:"async_timeout"`
	// AsyncMaxQueue unfinished jobs; default 64. Full → 429.
	AsyncMaxQueue int `toml:"async_max_queue"`
	// AsyncJobTTL in ms keeps a finished job; default 600000.
	AsyncJobTTL int `toml:"async_job_ttl"`
	// AsyncMaxCompleted finished jobs kept (oldest evicted first); default 1000.
	AsyncMaxCompleted int `toml:"async_max_completed"`
	// ModelConfigFilePath is the model's own TOML (type = "<model type>").
	// Required; relative to this file's directory.
	ModelConfigFilePath string `toml:"model_config_file_path"`
	// ORTLibPath is libonnxruntime.so.1; MORTRED_ORT_LIB overrides. Relative
	// to this file's directory.
	ORTLibPath string `toml:"ort_lib_path"`
	// IntraOpThreads for ONNX Runtime; default 0 (backend's choice).
	IntraOpThreads int `toml:"intra_op_threads"`
	// WarmupImages are the model's own sample images, which a rollout
	// sends through a new version before it takes traffic (the
	// supervisor's built-in samples when empty). Relative to this file's
	// directory; the model server itself does not read them.
	WarmupImages []string `toml:"warmup_images"`

	// Expose comes from MORTRED_EXPOSE: "", "docker" or "unsafe".
	Expose string `toml:"-"`
	// ModelType is the `type` key of the model's TOML.
	ModelType string `toml:"-"`
	// ModelName and ModelCategory are the optional `name` and `category`
	// keys of the model's TOML (for the catalog).
	ModelName, ModelCategory string `toml:"-"`
}

// RunTimeout is model_run_timeout, the request deadline.
func (s *Server) RunTimeout() time.Duration { return ms(s.ModelRunTimeout) }

// BatchDelay is max_batch_delay_ms.
func (s *Server) BatchDelay() time.Duration { return ms(*s.MaxBatchDelayMS) }

// JobTimeout is async_timeout, an async job's deadline.
func (s *Server) JobTimeout() time.Duration { return ms(s.AsyncTimeout) }

// JobTTL is async_job_ttl.
func (s *Server) JobTTL() time.Duration { return ms(s.AsyncJobTTL) }

// SizeLimitBytes is request_size_limit in bytes.
func (s *Server) SizeLimitBytes() int64 { return int64(s.RequestSizeLimit) << 20 }

// QueueDepth is max_queue_depth (0 = unlimited).
func (s *Server) QueueDepth() int { return *s.MaxQueueDepth }

// Addr is host:port to listen on.
func (s *Server) Addr() string {
	return net.JoinHostPort(strings.Trim(s.Host, "[]"), fmt.Sprint(*s.Port))
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func intp(n int) *int { return &n }

func defaultInt(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

// Env variable names the model server reads.
const (
	EnvListenHost = "MORTRED_LISTEN_HOST"
	EnvListenPort = "MORTRED_LISTEN_PORT"
	EnvAuthToken  = "MORTRED_AUTH_TOKEN"
	EnvExpose     = "MORTRED_EXPOSE"
	EnvORTLib     = "MORTRED_ORT_LIB"
)

// LoadServer reads a model-server file, applies the environment overrides
// and validates. Any invalid value is an error naming the key and the file.
func LoadServer(path string, env envconf.Env) (*Server, error) {
	s, err := readServer(path)
	if err != nil {
		return nil, err
	}
	if err := s.applyEnv(env); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.ORTLibPath != "" {
		// A named library must exist; without one the model finds it
		// by the search of package deps when it loads.
		if _, err := (deps.Finder{}).Lib(s.ORTLibPath); err != nil {
			return nil, fmt.Errorf("%s: [%s] %w", s.File, s.ID, err)
		}
	}
	return s, nil
}

// readServer parses and defaults a file without the environment (the
// catalog uses it: children get their overrides from the supervisor).
func readServer(path string) (*Server, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	var sections map[string]toml.Primitive
	md, err := toml.DecodeFile(abs, &sections)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("model-server file %s not found: pass --config with one of conf/server/*.toml (from the checkout)", abs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	var ids []string
	for k := range sections {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	if len(ids) != 1 {
		return nil, fmt.Errorf("%s: want exactly one section (the catalog id, e.g. [TESTMODEL]) holding server_uri, found %d %v", abs, len(ids), ids)
	}
	s := &Server{ID: ids[0], File: abs}
	if err := md.PrimitiveDecode(sections[s.ID], s); err != nil {
		return nil, fmt.Errorf("%s: [%s]: %w", abs, s.ID, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%s: unknown keys %v (see mortred/config.Server for the accepted keys)", abs, keys)
	}
	s.defaults()
	if err := s.readModelType(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) defaults() {
	if s.Host == "" {
		s.Host = "127.0.0.1"
	}
	if s.Port == nil {
		s.Port = intp(9001)
	}
	if s.MaxQueueDepth == nil {
		s.MaxQueueDepth = intp(256)
	}
	if s.MaxBatchDelayMS == nil {
		s.MaxBatchDelayMS = intp(5)
	}
	for _, d := range []struct {
		p   *int
		def int
	}{
		{&s.WorkerNums, 1}, {&s.RequestSizeLimit, 32}, {&s.ModelRunTimeout, 30000},
		{&s.MaxBatchSize, 1}, {&s.MaxRequestItems, 32}, {&s.AsyncTimeout, 300000},
		{&s.AsyncMaxQueue, 64}, {&s.AsyncJobTTL, 600000}, {&s.AsyncMaxCompleted, 1000},
	} {
		defaultInt(d.p, d.def)
	}
	dir := filepath.Dir(s.File)
	s.ModelConfigFilePath = resolve(dir, s.ModelConfigFilePath)
	s.ORTLibPath = resolve(dir, s.ORTLibPath)
	for i, p := range s.WarmupImages {
		s.WarmupImages[i] = resolve(dir, p)
	}
}

// MaxRequestItemsCap is the largest max_request_items a model server
// accepts: no answer of one can count more input images (the gateway
// holds X-Mortred-Items to it).
const MaxRequestItemsCap = 4096

func resolve(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// readModelType reads the keys of the model's TOML the server and the
// catalog need; the model's factory reads the rest itself.
func (s *Server) readModelType() error {
	if s.ModelConfigFilePath == "" {
		return fmt.Errorf("%s: [%s] model_config_file_path is required (the model's TOML with type = \"<model type>\")", s.File, s.ID)
	}
	var head struct {
		Type     string `toml:"type"`
		Name     string `toml:"name"`
		Category string `toml:"category"`
	}
	if _, err := toml.DecodeFile(s.ModelConfigFilePath, &head); err != nil {
		return fmt.Errorf("%s: [%s] model_config_file_path: %w", s.File, s.ID, err)
	}
	if head.Type == "" {
		return fmt.Errorf("%s: model config %s has no type key (want type = \"<registered model type>\")", s.File, s.ModelConfigFilePath)
	}
	s.ModelType, s.ModelName, s.ModelCategory = head.Type, head.Name, head.Category
	return nil
}

// applyEnv applies MORTRED_LISTEN_HOST, MORTRED_LISTEN_PORT,
// MORTRED_AUTH_TOKEN, MORTRED_EXPOSE and MORTRED_ORT_LIB. A present but
// invalid value is an error, not a silent default.
func (s *Server) applyEnv(env envconf.Env) error {
	var bad []string
	env.Warn = func(name, value, reason string) { bad = append(bad, fmt.Sprintf("%s=%q: %s", name, value, reason)) }
	s.Host = env.String(EnvListenHost, s.Host)
	port := env.Port(EnvListenPort, *s.Port, true)
	s.Port = &port
	s.AuthToken = env.String(EnvAuthToken, s.AuthToken)
	s.ORTLibPath = env.String(EnvORTLib, s.ORTLibPath)
	s.Expose = env.String(EnvExpose, "")
	if s.Expose != "" && s.Expose != "docker" && s.Expose != "unsafe" {
		bad = append(bad, fmt.Sprintf("%s=%q: must be docker or unsafe (or unset)", EnvExpose, s.Expose))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: invalid environment: %s", s.File, strings.Join(bad, "; "))
	}
	return nil
}

// Validate checks ranges and the fail-closed listen rules.
func (s *Server) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("[%s] %s: %s", s.ID, key, fmt.Sprintf(format, args...)))
	}
	if !strings.HasPrefix(s.ServerURI, "/") || strings.ContainsAny(s.ServerURI, " ?#{}") || s.ServerURI == "/" {
		bad("server_uri", "%q must be an absolute path such as /mortred_ai_server_v1/classification/model", s.ServerURI)
	}
	for _, reserved := range []string{"/healthz", "/ready", "/metrics", "/openapi.json", "/jobs"} {
		if s.ServerURI == reserved || strings.HasPrefix(s.ServerURI, "/jobs/") {
			bad("server_uri", "%q collides with the built-in route %s", s.ServerURI, reserved)
			break
		}
	}
	if p := *s.Port; p < 0 || p > 65535 {
		bad("port", "%d is not a port number", p)
	}
	checks := []struct {
		key       string
		v, lo, hi int
	}{
		{"worker_nums", s.WorkerNums, 1, 256},
		{"request_size_limit", s.RequestSizeLimit, 1, 4096},
		{"model_run_timeout", s.ModelRunTimeout, 1, 3600_000},
		{"max_queue_depth", *s.MaxQueueDepth, 0, 1 << 20},
		{"max_batch_size", s.MaxBatchSize, 1, 1024},
		{"max_batch_delay_ms", *s.MaxBatchDelayMS, 0, 10_000},
		{"max_request_items", s.MaxRequestItems, 1, MaxRequestItemsCap},
		{"async_timeout", s.AsyncTimeout, 1, 24 * 3600_000},
		{"async_max_queue", s.AsyncMaxQueue, 1, 1 << 20},
		{"async_job_ttl", s.AsyncJobTTL, 1, 7 * 24 * 3600_000},
		{"async_max_completed", s.AsyncMaxCompleted, 1, 1 << 20},
		{"intra_op_threads", s.IntraOpThreads, 0, 1024},
	}
	for _, c := range checks {
		if c.v < c.lo || c.v > c.hi {
			bad(c.key, "%d is out of range %d..%d", c.v, c.lo, c.hi)
		}
	}
	if s.RateLimitQPS < 0 || s.RateLimitQPS > 1e6 || s.RateLimitQPS != s.RateLimitQPS {
		bad("rate_limit_qps", "%v must be between 0 (no limit) and 1e6", s.RateLimitQPS)
	}
	if err := CheckListen(s.Host, s.AuthToken != "", s.Expose); err != nil {
		errs = append(errs, fmt.Errorf("[%s] host: %w", s.ID, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", s.File, errors.Join(errs...))
	}
	return nil
}

// CheckListen is the fail-closed listen rule: a wildcard bind needs
// MORTRED_EXPOSE=docker|unsafe, and any non-loopback bind needs a token.
func CheckListen(host string, hasToken bool, expose string) error {
	h := strings.Trim(host, "[]")
	ip := net.ParseIP(h)
	wildcard := h == "" || h == "*" || (ip != nil && ip.IsUnspecified())
	loopback := h == "localhost" || (ip != nil && ip.IsLoopback())
	if wildcard && expose != "docker" && expose != "unsafe" {
		return fmt.Errorf("refusing wildcard bind %q: model ports are loopback-only; listen on 127.0.0.1, or set MORTRED_EXPOSE=docker (container) or unsafe", host)
	}
	if !loopback && !hasToken {
		return fmt.Errorf("refusing non-loopback listen %q without auth_token: set auth_token or MORTRED_AUTH_TOKEN, or listen on 127.0.0.1", host)
	}
	return nil
}
