// Package serve is the mentatd-serve router: discovery of the cluster's
// daemons, the group table, admission probes, and the immutable route
// snapshot that the request proxy, the MCP merge and the stats read.
package serve

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/mentat/serve/balance"
	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Defaults from the manual's Environment section.
const (
	DefaultServePort      = 6381
	DefaultDaemon         = "127.0.0.1:6380"
	DefaultDaemonPort     = 6380
	DefaultAnnouncePort   = 6382
	DefaultAllowedSources = "10.100.0.,192.168.1.,127.0.0.1,::1,172."
	DefaultPollInterval   = 10 * time.Second
	DefaultProbeInterval  = 5 * time.Second
	DefaultProbeTimeout   = 3 * time.Second
	DefaultServingTimeout = 1800 * time.Second
	DefaultMCPTimeout     = 180 * time.Second
	DefaultToolsTTL       = 60 * time.Second
	DefaultMCPSessionMax  = 24 * time.Hour
	DefaultUniverse       = wire.DefaultUniverse
)

// Defaults of the stop (see Server.Run).
const (
	// DefaultDrain is SERVE_DRAIN_S's default: a balancer that polls
	// /readyz every second and needs three failures has time to see the
	// 503, with room to spare.
	DefaultDrain = 5 * time.Second
	// DefaultShutdownTimeout is SERVE_SHUTDOWN_S's default.
	DefaultShutdownTimeout = 30 * time.Second
)

// Config is the router's configuration. LoadConfig fills it from the
// environment; tests build it with DefaultConfig and change fields.
type Config struct {
	// Port is SERVE_PORT (default 6381).
	Port int
	// HTTPAddr is the listen address; default ":"+Port (every address, as
	// the manual implies). Tests use "127.0.0.1:0".
	HTTPAddr string
	// Daemons is MENTAT_DAEMONS as host:port (default 127.0.0.1:6380; set
	// and empty seeds nothing).
	Daemons []string
	// AnnouncePort is MENTAT_ANNOUNCE_PORT (default 6382; 0 = off).
	AnnouncePort int
	// AnnounceAddr is the UDP listen address; default ":"+AnnouncePort,
	// empty when AnnouncePort is 0. Tests use "127.0.0.1:0".
	AnnounceAddr string
	// AllowedSources is ALLOWED_SOURCES, address prefixes.
	AllowedSources []string
	// DiscoverPeers is DISCOVER_PEERS == "1" (default on).
	DiscoverPeers bool
	// PollInterval is POLL_INTERVAL_S (default 10 s); a daemon view older
	// than three of them is stale.
	PollInterval time.Duration
	// ProbeInterval is PROBE_INTERVAL_S (default 5 s).
	ProbeInterval time.Duration
	// ProbeTimeout is PROBE_TIMEOUT_S (default 3 s), one probe's deadline.
	ProbeTimeout time.Duration
	// ProbeFresh is PROBE_FRESH_S (default 3 probe intervals + 1 timeout).
	ProbeFresh time.Duration
	// ProbePromote is PROBE_PROMOTE_S (default 6 probe intervals).
	ProbePromote time.Duration
	// ServingTimeout is SERVING_TIMEOUT_S (default 1800 s), one upstream
	// request's deadline (used by the proxy).
	ServingTimeout time.Duration
	// MCPTimeout is MCP_TIMEOUT_S (default 180 s).
	MCPTimeout time.Duration
	// ToolsTTL is TOOLS_TTL_S (default 60 s).
	ToolsTTL time.Duration
	// MCPSessionMax is MCP_SESSION_MAX_S (default 86400 s): the absolute
	// lifetime of a 2025-era MCP session from its initialize.
	MCPSessionMax time.Duration
	// SessionKeyFile is MENTAT_SESSION_KEY_FILE, the key that seals MCP
	// session ids (read by the app, mcp.LoadSessionKeys); "" makes a
	// random key at start, so a session continues on this router only.
	SessionKeyFile string
	// Edge is the listener's limits: SERVE_READ_HEADER_TIMEOUT_S,
	// SERVE_BODY_TIMEOUT_S, SERVE_IDLE_TIMEOUT_S, SERVE_WRITE_TIMEOUT_S,
	// SERVE_MAX_HEADER_BYTES and SERVE_MAX_CONNECTIONS (0: no cap), with
	// the httpx defaults.
	Edge httpx.Limits
	// Routing is the replica balancer's configuration: ROUTING_POLICY
	// (default prefix), ROUTING_THRESHOLD (default 12 requests),
	// ROUTING_SESSION_HEADER (default X-Session-ID), ROUTING_SCRAPE_S
	// (default 1 s; the scrape timeout is PROBE_TIMEOUT_S) and
	// ROUTING_INDEX_BLOCKS (0: balance.DefaultIndexBlocks).
	Routing balance.Config
	// IndexFile is ROUTING_INDEX_FILE: where the router saves its prefix
	// index when it stops and reads it from when it starts
	// (balance.Balancer.SaveIndexFile); "" keeps it in memory only.
	IndexFile string
	// Secret is the announcement HMAC key (MENTAT_SECRET_FILE's contents,
	// else MENTAT_SECRET), trimmed; nil accepts unsigned announcements.
	Secret []byte
	// Universe is MENTAT_UNIVERSE (default "default").
	Universe string
	// Subnets returns the subnets the router is attached to; nil reads the
	// host's interfaces. Tests inject their own.
	Subnets discovery.SubnetsFunc
	// KeysFile is SERVE_KEYS_FILE, the key file (internal/keys); "" turns
	// keys off: nothing is authenticated, as before keys existed.
	KeysFile string
	// UpstreamKeysFile is SERVE_UPSTREAM_KEYS_FILE, the keys the router
	// sends each group's engine (package upstream); "" sends none.
	UpstreamKeysFile string
	// CORSOrigins is SERVE_CORS_ORIGINS, the browser origins that may call
	// the router (httpx.CORS); empty answers no preflight.
	CORSOrigins []string
	// Flow is FLOW_CONTROL == "on" (default off): hold requests in the
	// router while every replica of their model is saturated (package
	// flow), with FlowLimits (the FLOW_WAIT_S_*, FLOW_QUEUE_* variables).
	// Saturation's own settings are in Routing (FLOW_MAX_INFLIGHT,
	// FLOW_KV_THRESHOLD).
	Flow       bool
	FlowLimits flow.Config
	// KeepAlive is SSE_KEEPALIVE_S (default 0: off): a streamed request
	// waiting longer gets SSE comment lines at that interval.
	KeepAlive time.Duration
	// ModelWait is MODEL_WAIT_S (default 0: off): how long a request for
	// a model that routed recently waits for it to route again.
	ModelWait time.Duration
	// Drain is SERVE_DRAIN_S (default 5 s; must be positive): after
	// SIGTERM or SIGINT the router goes on serving this long, with
	// /readyz answering 503 and every answer carrying Connection: close,
	// before it stops accepting connections.
	Drain time.Duration
	// ShutdownTimeout is SERVE_SHUTDOWN_S (default 30 s; must be
	// positive): once the router stops accepting, how long requests and
	// streams in flight may still run before the router ends them.
	ShutdownTimeout time.Duration
}

// DefaultConfig is the configuration with nothing set.
func DefaultConfig() Config {
	c, err := LoadConfig(envconf.Map(nil))
	if err != nil {
		panic(err) // defaults are valid by construction
	}
	return c
}

// LoadConfig reads the environment. It fails only where the manual says the
// process stops at boot (an unreadable or empty MENTAT_SECRET_FILE) or where
// a value cannot mean anything (a MENTAT_DAEMONS entry that is not an
// address, a SERVE_CORS_ORIGINS entry that is not an origin); everything
// else falls back to its default. The key files are read by the app, which
// reports their errors with file and line.
func LoadConfig(env envconf.Env) (Config, error) {
	c := Config{
		Port:           env.Port("SERVE_PORT", DefaultServePort, false),
		AnnouncePort:   env.Port("MENTAT_ANNOUNCE_PORT", DefaultAnnouncePort, true),
		AllowedSources: env.List("ALLOWED_SOURCES", envconf.SplitList(DefaultAllowedSources)),
		DiscoverPeers:  env.String("DISCOVER_PEERS", "1") == "1",
		PollInterval:   env.Duration("POLL_INTERVAL_S", DefaultPollInterval),
		ProbeInterval:  env.Duration("PROBE_INTERVAL_S", DefaultProbeInterval),
		ProbeTimeout:   env.Duration("PROBE_TIMEOUT_S", DefaultProbeTimeout),
		ServingTimeout: env.Duration("SERVING_TIMEOUT_S", DefaultServingTimeout),
		MCPTimeout:     env.Duration("MCP_TIMEOUT_S", DefaultMCPTimeout),
		ToolsTTL:       env.Duration("TOOLS_TTL_S", DefaultToolsTTL),
		MCPSessionMax:  env.Duration("MCP_SESSION_MAX_S", DefaultMCPSessionMax),
		Universe:       env.String("MENTAT_UNIVERSE", DefaultUniverse),
	}
	c.Edge = httpx.Limits{
		ReadHeaderTimeout: env.Duration("SERVE_READ_HEADER_TIMEOUT_S", httpx.DefaultReadHeaderTimeout),
		BodyTimeout:       env.Duration("SERVE_BODY_TIMEOUT_S", httpx.DefaultBodyTimeout),
		IdleTimeout:       env.Duration("SERVE_IDLE_TIMEOUT_S", httpx.DefaultIdleTimeout),
		WriteTimeout:      env.Duration("SERVE_WRITE_TIMEOUT_S", httpx.DefaultWriteTimeout),
		MaxHeaderBytes:    env.Int("SERVE_MAX_HEADER_BYTES", httpx.DefaultMaxHeaderBytes),
		MaxConns:          env.Int("SERVE_MAX_CONNECTIONS", httpx.DefaultMaxConns),
	}
	if c.Edge.MaxConns == 0 {
		c.Edge.MaxConns = -1 // no cap
	}
	c.Edge = c.Edge.WithDefaults()
	c.Routing = balance.Config{
		Policy: balance.Policy(env.Choice("ROUTING_POLICY", string(balance.Prefix), func(v string) (string, error) {
			p, err := balance.ParsePolicy(v)
			return string(p), err
		})),
		SessionHeader:  env.String("ROUTING_SESSION_HEADER", balance.DefaultSessionHeader),
		ScrapeInterval: env.Duration("ROUTING_SCRAPE_S", balance.DefaultScrapeInterval),
		ScrapeTimeout:  c.ProbeTimeout,
	}
	if n := env.Int("ROUTING_THRESHOLD", balance.DefaultThreshold); n > 0 {
		c.Routing.Threshold = float64(n)
	} else if env.Warn != nil {
		env.Warn("ROUTING_THRESHOLD", "0", "must be a positive number of requests; using the default")
	}
	switch n := env.Int("ROUTING_INDEX_BLOCKS", 0); {
	case n > 0:
		c.Routing.IndexBlocks = n
	case n < 0 && env.Warn != nil:
		env.Warn("ROUTING_INDEX_BLOCKS", strconv.Itoa(n), "must be a positive number of blocks; using the default")
	}
	if path, ok := env.Value("ROUTING_INDEX_FILE"); ok && path != "" {
		// A router that cannot save its index at its stop should say so
		// at its start, while the operator is looking.
		if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
			return Config{}, fmt.Errorf("ROUTING_INDEX_FILE: the directory of %s does not exist", path)
		}
		c.IndexFile = path
	}
	c.Routing.MaxInflight = env.Int("FLOW_MAX_INFLIGHT", 0)
	c.Routing.SaturatedKV = env.Fraction("FLOW_KV_THRESHOLD", balance.KVFull)
	c.Flow = env.Choice("FLOW_CONTROL", "off", func(v string) (string, error) {
		switch strings.ToLower(v) {
		case "on", "1", "true":
			return "on", nil
		case "off", "0", "false":
			return "off", nil
		}
		return "", fmt.Errorf("must be on or off")
	}) == "on"
	c.Routing.Flow = c.Flow
	for b := flow.Critical; b < flow.NumBands; b++ {
		name := strings.ToUpper(b.String())
		c.FlowLimits.MaxWait[b] = env.Duration("FLOW_WAIT_S_"+name, flow.DefaultMaxWait[b])
		c.FlowLimits.MaxQueue[b] = env.Int("FLOW_QUEUE_"+name, flow.DefaultMaxQueue[b])
	}
	c.FlowLimits.MaxTotal = env.Int("FLOW_QUEUE_TOTAL", flow.DefaultMaxTotal)
	c.FlowLimits.Burst = float64(env.Int("FLOW_BURST_TOKENS", flow.DefaultBurst))
	c.KeepAlive = env.Duration("SSE_KEEPALIVE_S", 0)
	c.ModelWait = env.Duration("MODEL_WAIT_S", 0)
	c.Drain = drainSeconds(env)
	c.ShutdownTimeout = env.Duration("SERVE_SHUTDOWN_S", DefaultShutdownTimeout)
	c.ProbeFresh = env.Duration("PROBE_FRESH_S", 3*c.ProbeInterval+c.ProbeTimeout)
	c.ProbePromote = env.Duration("PROBE_PROMOTE_S", 6*c.ProbeInterval)
	c.HTTPAddr = ":" + strconv.Itoa(c.Port)
	if c.AnnouncePort != 0 {
		c.AnnounceAddr = ":" + strconv.Itoa(c.AnnouncePort)
	}
	for _, d := range env.ListSet("MENTAT_DAEMONS", []string{DefaultDaemon}) {
		addr, err := DaemonAddr(d)
		if err != nil {
			return Config{}, fmt.Errorf("MENTAT_DAEMONS: %w", err)
		}
		c.Daemons = append(c.Daemons, addr)
	}
	if c.Daemons == nil {
		c.Daemons = []string{}
	}
	c.KeysFile, _ = env.Value("SERVE_KEYS_FILE")
	c.UpstreamKeysFile, _ = env.Value("SERVE_UPSTREAM_KEYS_FILE")
	c.SessionKeyFile, _ = env.Value("MENTAT_SESSION_KEY_FILE")
	c.CORSOrigins = env.List("SERVE_CORS_ORIGINS", nil)
	if err := httpx.CheckOrigins(c.CORSOrigins); err != nil {
		return Config{}, fmt.Errorf("SERVE_CORS_ORIGINS: %w", err)
	}
	if path, ok := env.Value("MENTAT_SECRET_FILE"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("MENTAT_SECRET_FILE: cannot read the announcement key: %w", err)
		}
		key := wire.TrimKey(string(b))
		if key == "" {
			return Config{}, fmt.Errorf("MENTAT_SECRET_FILE: %s is empty; put the cluster's announcement key in it or unset the variable", path)
		}
		c.Secret = []byte(key)
	} else if s := wire.TrimKey(env.String("MENTAT_SECRET", "")); s != "" {
		c.Secret = []byte(s)
	}
	return c, nil
}

// drainSeconds reads SERVE_DRAIN_S. Zero is refused like any *_S value
// that is not positive, with a reason that says how to stop almost at
// once instead: a drain of zero would take the router out of a balancer's
// pool only after it had stopped accepting.
func drainSeconds(env envconf.Env) time.Duration {
	if v, ok := env.Value("SERVE_DRAIN_S"); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f == 0 {
			if env.Warn != nil {
				env.Warn("SERVE_DRAIN_S", v, "must be a positive number of seconds (for a stop with next to no drain, set a small one such as 0.1); using the default")
			}
			return DefaultDrain
		}
	}
	return env.Duration("SERVE_DRAIN_S", DefaultDrain)
}

// DaemonAddr normalises one MENTAT_DAEMONS entry to host:port: "host" gets
// the daemon's default port 6380, and an http:// prefix or trailing slash
// is tolerated.
func DaemonAddr(s string) (string, error) {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "http://"), "/")
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// No port: a bare host or IPv6 literal.
		host, port = strings.Trim(s, "[]"), strconv.Itoa(DefaultDaemonPort)
	}
	n, perr := strconv.Atoi(port)
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		host = ""
	}
	if host == "" || strings.ContainsAny(host, "/ ?#@") || perr != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q is not a daemon address; want host:port such as 10.100.0.1:6380", s)
	}
	return net.JoinHostPort(host, port), nil
}
