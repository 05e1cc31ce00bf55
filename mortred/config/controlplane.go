package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fe64bb06/frontdoor/internal/httpx"
)

// ControlPlane is conf/mortred.toml: the supervisor, the gateway and the
// per-server lifecycle settings.
type ControlPlane struct {
	File       string                  `toml:"-"`
	Supervisor Supervisor              `toml:"supervisor"`
	Gateway    Gateway                 `toml:"gateway"`
	Servers    map[string]ServerPolicy `toml:"servers"`
}

// Supervisor is [supervisor].
type Supervisor struct {
	// APIHost default 127.0.0.1.
	APIHost string `toml:"api_host"`
	// APIPort default 8787.
	APIPort int `toml:"api_port"`
	// AutostartDefault applies to servers without autostart; default true.
	AutostartDefault *bool `toml:"autostart_default"`
	// StartConcurrency model servers starting at once; default 2.
	StartConcurrency int `toml:"start_concurrency"`
	// LogDir for child logs; default "logs", relative to this file's directory.
	LogDir string `toml:"log_dir"`
	// LogRotateMB rotates a child log at this size; default 10.
	LogRotateMB int `toml:"log_rotate_mb"`
	// ServerConfDir holds the model-server files (the catalog); default
	// "server", relative to this file's directory.
	ServerConfDir string `toml:"server_conf_dir"`
	// RunDir holds what rollouts write: the new versions' files and the
	// gateway's routes to them; default "run", relative to this file's
	// directory.
	RunDir string `toml:"run_dir"`
}

// Gateway is [gateway].
type Gateway struct {
	// Host default 127.0.0.1.
	Host string `toml:"host"`
	// Port default 8080.
	Port int `toml:"port"`
	// RequestSizeLimitMB default 64.
	RequestSizeLimitMB int `toml:"request_size_limit_mb"`
	// MaxConnections open at once; default 1024.
	MaxConnections int `toml:"max_connections"`
	// UpstreamConnectTimeoutMS to dial a model server; default 2000.
	UpstreamConnectTimeoutMS int `toml:"upstream_connect_timeout_ms"`
	// UpstreamResponseTimeoutMS until the model server's response headers;
	// default 330000 (longer than the longest job wait, 300 s).
	UpstreamResponseTimeoutMS int `toml:"upstream_response_timeout_ms"`
	// UpstreamIdleTimeoutMS keeps idle upstream connections; default 90000
	// (below the model servers' 120 s keep-alive).
	UpstreamIdleTimeoutMS int `toml:"upstream_idle_timeout_ms"`
	// ReadHeaderTimeoutMS bounds reading a client's request head; default
	// 10000.
	ReadHeaderTimeoutMS int `toml:"read_header_timeout_ms"`
	// BodyTimeoutMS bounds receiving a client's request body; default 60000.
	BodyTimeoutMS int `toml:"body_timeout_ms"`
	// IdleTimeoutMS closes an idle client keep-alive connection; default
	// 90000.
	IdleTimeoutMS int `toml:"idle_timeout_ms"`
	// WriteTimeoutMS bounds writing an answer that is not a stream; default
	// 60000.
	WriteTimeoutMS int `toml:"write_timeout_ms"`
	// MaxHeaderBytes bounds a client's request head (431 over it); default
	// 65536.
	MaxHeaderBytes int `toml:"max_header_bytes"`
	// KeysFile is the API key file (docs/mortred-gateway.md, "Keys and
	// tenants"), relative to this file's directory; "" keeps the one
	// inference token.
	KeysFile string `toml:"keys_file"`
	// CORSOrigins are the browser origins whose pages may call the
	// gateway (scheme://host[:port], no wildcard); empty: no CORS.
	CORSOrigins []string `toml:"cors_origins"`
	// HostID names this host among several behind one edge (lower-case
	// letters, digits and '-'); async job ids then carry it. "" is one
	// host. MORTRED_HOST_ID overrides it.
	HostID string `toml:"host_id"`
	// Peers maps host ids to their gateways' host:port, so that a job
	// request for a job another host holds is forwarded there. It may list
	// this host too: every host can share one file.
	Peers map[string]string `toml:"peers"`
	// DrainMS is how long a stopping gateway keeps serving with /readyz
	// answering 503 before it stops accepting; default 0.
	DrainMS int `toml:"drain_ms"`
	// ShutdownTimeoutMS bounds the wait for in-flight requests once the
	// gateway stops accepting; default 10000.
	ShutdownTimeoutMS int `toml:"shutdown_timeout_ms"`
}

// ServerPolicy is [servers.<id>].
type ServerPolicy struct {
	// Enabled default true; a disabled server is in the catalog but never started.
	Enabled *bool `toml:"enabled"`
	// Autostart default [supervisor].autostart_default.
	Autostart *bool `toml:"autostart"`
	// RestartPolicy on-failure (default), always or no.
	RestartPolicy string `toml:"restart_policy"`
}

// Restart policies.
const (
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
	RestartNo        = "no"
)

// UpstreamConnectTimeout and friends are the ms fields as durations.
func (g Gateway) UpstreamConnectTimeout() time.Duration { return ms(g.UpstreamConnectTimeoutMS) }

// UpstreamResponseTimeout is upstream_response_timeout_ms.
func (g Gateway) UpstreamResponseTimeout() time.Duration { return ms(g.UpstreamResponseTimeoutMS) }

// UpstreamIdleTimeout is upstream_idle_timeout_ms.
func (g Gateway) UpstreamIdleTimeout() time.Duration { return ms(g.UpstreamIdleTimeoutMS) }

// ReadHeaderTimeout is read_header_timeout_ms.
func (g Gateway) ReadHeaderTimeout() time.Duration { return ms(g.ReadHeaderTimeoutMS) }

// BodyTimeout is body_timeout_ms.
func (g Gateway) BodyTimeout() time.Duration { return ms(g.BodyTimeoutMS) }

// IdleTimeout is idle_timeout_ms.
func (g Gateway) IdleTimeout() time.Duration { return ms(g.IdleTimeoutMS) }

// WriteTimeout is write_timeout_ms.
func (g Gateway) WriteTimeout() time.Duration { return ms(g.WriteTimeoutMS) }

// Drain is drain_ms.
func (g Gateway) Drain() time.Duration { return ms(g.DrainMS) }

// ShutdownTimeout is shutdown_timeout_ms.
func (g Gateway) ShutdownTimeout() time.Duration { return ms(g.ShutdownTimeoutMS) }

// LoadControlPlane reads and validates conf/mortred.toml. Unknown keys are
// errors.
func LoadControlPlane(path string) (*ControlPlane, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{File: abs}
	md, err := toml.DecodeFile(abs, cp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("control-plane file %s not found: run from the checkout (it has conf/mortred.toml) or pass --config PATH", abs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abs, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("%s: unknown keys %v", abs, keys)
	}
	cp.defaults()
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	return cp, nil
}

// DefaultControlPlane is the configuration when no file is given.
func DefaultControlPlane(dir string) *ControlPlane {
	cp := &ControlPlane{File: filepath.Join(dir, "mortred.toml")}
	cp.defaults()
	return cp
}

func (cp *ControlPlane) defaults() {
	dir := filepath.Dir(cp.File)
	s := &cp.Supervisor
	if s.APIHost == "" {
		s.APIHost = "127.0.0.1"
	}
	if s.AutostartDefault == nil {
		t := true
		s.AutostartDefault = &t
	}
	if s.LogDir == "" {
		s.LogDir = "logs"
	}
	if s.ServerConfDir == "" {
		s.ServerConfDir = "server"
	}
	s.LogDir = resolve(dir, s.LogDir)
	s.ServerConfDir = resolve(dir, s.ServerConfDir)
	if s.RunDir == "" {
		s.RunDir = "run"
	}
	s.RunDir = resolve(dir, s.RunDir)
	defaultInt(&s.APIPort, 8787)
	defaultInt(&s.StartConcurrency, 2)
	defaultInt(&s.LogRotateMB, 10)
	g := &cp.Gateway
	if g.Host == "" {
		g.Host = "127.0.0.1"
	}
	defaultInt(&g.Port, 8080)
	defaultInt(&g.RequestSizeLimitMB, 64)
	defaultInt(&g.MaxConnections, 1024)
	defaultInt(&g.UpstreamConnectTimeoutMS, 2000)
	defaultInt(&g.UpstreamResponseTimeoutMS, 330000)
	defaultInt(&g.UpstreamIdleTimeoutMS, 90000)
	defaultInt(&g.ReadHeaderTimeoutMS, 10000)
	defaultInt(&g.BodyTimeoutMS, 60000)
	defaultInt(&g.IdleTimeoutMS, 90000)
	defaultInt(&g.WriteTimeoutMS, 60000)
	defaultInt(&g.MaxHeaderBytes, 65536)
	defaultInt(&g.ShutdownTimeoutMS, 10000)
	g.KeysFile = resolve(dir, g.KeysFile)
	if cp.Servers == nil {
		cp.Servers = map[string]ServerPolicy{}
	}
	for id, p := range cp.Servers {
		if p.Enabled == nil {
			t := true
			p.Enabled = &t
		}
		if p.Autostart == nil {
			a := *s.AutostartDefault
			p.Autostart = &a
		}
		if p.RestartPolicy == "" {
			p.RestartPolicy = RestartOnFailure
		}
		cp.Servers[id] = p
	}
}

// Validate checks ranges, restart policies and that the supervisor and the
// gateway do not share a port.
func (cp *ControlPlane) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	s, g := cp.Supervisor, cp.Gateway
	if s.APIPort < 1 || s.APIPort > 65535 {
		bad("[supervisor] api_port", "%d is not a port number", s.APIPort)
	}
	if g.Port < 1 || g.Port > 65535 {
		bad("[gateway] port", "%d is not a port number", g.Port)
	}
	if s.APIPort == g.Port && s.APIHost == g.Host {
		bad("[gateway] port", "%d is also [supervisor] api_port", g.Port)
	}
	for _, c := range []struct {
		key       string
		v, lo, hi int
	}{
		{"[supervisor] start_concurrency", s.StartConcurrency, 1, 256},
		{"[supervisor] log_rotate_mb", s.LogRotateMB, 1, 1 << 16},
		{"[gateway] request_size_limit_mb", g.RequestSizeLimitMB, 1, 4096},
		{"[gateway] max_connections", g.MaxConnections, 1, 1 << 20},
		{"[gateway] upstream_connect_timeout_ms", g.UpstreamConnectTimeoutMS, 1, 600_000},
		{"[gateway] upstream_response_timeout_ms", g.UpstreamResponseTimeoutMS, 1, 24 * 3600_000},
		{"[gateway] upstream_idle_timeout_ms", g.UpstreamIdleTimeoutMS, 1, 24 * 3600_000},
		{"[gateway] read_header_timeout_ms", g.ReadHeaderTimeoutMS, 1, 3600_000},
		{"[gateway] body_timeout_ms", g.BodyTimeoutMS, 1, 24 * 3600_000},
		{"[gateway] idle_timeout_ms", g.IdleTimeoutMS, 1, 24 * 3600_000},
		{"[gateway] write_timeout_ms", g.WriteTimeoutMS, 1, 24 * 3600_000},
		{"[gateway] max_header_bytes", g.MaxHeaderBytes, 1024, 16 << 20},
		{"[gateway] drain_ms", g.DrainMS, 0, 3600_000},
		{"[gateway] shutdown_timeout_ms", g.ShutdownTimeoutMS, 1, 3600_000},
	} {
		if c.v < c.lo || c.v > c.hi {
			bad(c.key, "%d is out of range %d..%d", c.v, c.lo, c.hi)
		}
	}
	if err := httpx.CheckOrigins(g.CORSOrigins); err != nil {
		bad("[gateway] cors_origins", "%v", err)
	}
	ids := make([]string, 0, len(cp.Servers))
	for id := range cp.Servers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		switch p := cp.Servers[id].RestartPolicy; p {
		case RestartOnFailure, RestartAlways, RestartNo:
		default:
			bad("[servers."+id+"] restart_policy", "%q must be on-failure, always or no", p)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", cp.File, errors.Join(errs...))
	}
	return nil
}

// Policy returns the lifecycle settings of a catalog id (defaults when the
// file has no [servers.<id>]).
func (cp *ControlPlane) Policy(id string) ServerPolicy {
	if p, ok := cp.Servers[id]; ok {
		return p
	}
	t, a := true, *cp.Supervisor.AutostartDefault
	return ServerPolicy{Enabled: &t, Autostart: &a, RestartPolicy: RestartOnFailure}
}

// CheckCatalog reports [servers.<id>] sections naming no catalog entry and
// model servers whose port is the gateway's or the supervisor's.
func (cp *ControlPlane) CheckCatalog(c *Catalog) error {
	var errs []error
	ids := make([]string, 0, len(cp.Servers))
	for id := range cp.Servers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if c.ByID(id) == nil {
			errs = append(errs, fmt.Errorf("[servers.%s]: no model-server file in %s has section [%s] (catalog: %v)", id, c.Dir, id, c.IDs()))
		}
	}
	for _, e := range c.Entries {
		switch e.Port {
		case cp.Gateway.Port:
			errs = append(errs, fmt.Errorf("%s: port %d is the gateway's port", e.Config.File, e.Port))
		case cp.Supervisor.APIPort:
			errs = append(errs, fmt.Errorf("%s: port %d is the supervisor's api_port", e.Config.File, e.Port))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", cp.File, errors.Join(errs...))
	}
	return nil
}
