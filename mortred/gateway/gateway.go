// Package gateway is mortred's authenticated data plane: one public listener
// (default :8080) in front of the loopback model servers. It checks the
// external Bearer token (or, with a key file, the tenant's API key, its
// model scope and limits), routes by catalog id (/v1/models/{id}/...) and then
// by legacy server_uri, forwards to the model's port with the model's own
// token, streams bodies both ways, and stays stateless: async job answers are
// rewritten onto the /v1/models/{id}/ prefix instead of being remembered.
package gateway

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/prometheus/client_golang/prometheus"
)

// Upstream is one model server as the gateway sees it.
type Upstream struct {
	// ID is the catalog id (the TOML section holding server_uri).
	ID string
	// URI is the model's legacy inference path (server_uri).
	URI string
	// Addr is the model server's loopback host:port.
	Addr string
	// Token is the model server's own Bearer token ("" sends none).
	Token string
}

// Config is the gateway's configuration. Zero durations take the defaults
// noted on each field.
type Config struct {
	// Token is the external inference Bearer token; required.
	Token string
	// MetricsToken guards GET /metrics; required and distinct from Token.
	MetricsToken string
	// MaxBody is the request size limit in bytes; 0 means 64 MiB.
	MaxBody int64
	// Upstreams is the catalog.
	Upstreams []Upstream
	// DialTimeout bounds connecting to a model server; 0 means 2 s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a model's response headers;
	// 0 means 10 minutes (inference deadlines are the model server's job).
	ResponseHeaderTimeout time.Duration
	// MaxConnsPerModel bounds open connections to one model server; 0 means
	// no limit.
	MaxConnsPerModel int
	// IdleConnTimeout drops a pooled model-server connection idle this
	// long; 0 means 90 s (below the model servers' 120 s keep-alive).
	IdleConnTimeout time.Duration
	// Edge is the public listener's limits (zero fields: the httpx
	// defaults). The gateway applies BodyTimeout while a body streams in
	// and WriteTimeout to answers that are not streams.
	Edge httpx.Limits
	// KeysFile is the API key file ([gateway] keys_file); "" keeps Token as
	// the only inference secret. With it, Token is the operator's key: all
	// models, no limits, shown as id "operator".
	KeysFile string
	// CORSOrigins are the origins whose browser pages may call the gateway
	// ([gateway] cors_origins); empty answers no preflight.
	CORSOrigins []string
	// HostID names this host when several stand behind one edge ([gateway]
	// host_id or MORTRED_HOST_ID): job ids become HOST.ID and answers carry
	// X-Mortred-Host. "" keeps job ids as the model servers make them.
	HostID string
	// Peers maps other hosts' ids to their gateways (host:port), to forward
	// requests for the jobs they hold. An entry for HostID is ignored.
	Peers map[string]string
	// RoutesFile is the routes file the supervisor writes during model
	// rollouts (MORTRED_ROUTES_FILE; no mortred.toml key). "" or a path
	// where no file exists serves every model at its catalog address; a
	// file that exists must parse, or New fails. ReloadRoutes reads it
	// again.
	RoutesFile string
}

// DefaultMaxBody is the request size limit when Config.MaxBody is 0.
const DefaultMaxBody = 64 << 20

// DefaultIdleConnTimeout is Config.IdleConnTimeout's default: below the
// model servers' own 120 s keep-alive, so the gateway drops an idle
// connection before the model server does.
const DefaultIdleConnTimeout = 90 * time.Second

// Validate applies defaults and refuses a configuration that would start
// open: no inference token, no metrics token, the same value for both,
// or a duplicate id or URI.
func (c *Config) Validate() error {
	if c.Token == "" {
		return errors.New("no inference token: set MORTRED_GATEWAY_AUTH_TOKEN or MORTRED_API_TOKEN (mortredctl init-trust writes fresh ones)")
	}
	if c.MetricsToken == "" {
		return errors.New("no metrics token: set MORTRED_METRICS_TOKEN to a secret distinct from the inference token")
	}
	if subtle.ConstantTimeCompare([]byte(c.Token), []byte(c.MetricsToken)) == 1 {
		return errors.New("MORTRED_METRICS_TOKEN equals the inference token: the scrape secret must be distinct")
	}
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.ResponseHeaderTimeout <= 0 {
		c.ResponseHeaderTimeout = 10 * time.Minute
	}
	if c.IdleConnTimeout <= 0 {
		c.IdleConnTimeout = DefaultIdleConnTimeout
	}
	c.Edge = c.Edge.WithDefaults()
	ids, uris := map[string]bool{}, map[string]bool{}
	for _, u := range c.Upstreams {
		switch {
		case u.ID == "" || strings.ContainsAny(u.ID, "/?#"):
			return fmt.Errorf("catalog id %q is not a valid path segment", u.ID)
		case ids[u.ID]:
			return fmt.Errorf("duplicate catalog id %q", u.ID)
		case u.URI == "" || u.URI[0] != '/':
			return fmt.Errorf("model %s: server_uri %q must start with /", u.ID, u.URI)
		case uris[u.URI]:
			return fmt.Errorf("model %s: duplicate server_uri %q", u.ID, u.URI)
		}
		if _, _, err := net.SplitHostPort(u.Addr); err != nil {
			return fmt.Errorf("model %s: bad address %q: %v", u.ID, u.Addr, err)
		}
		ids[u.ID], uris[u.URI] = true, true
	}
	if err := httpx.CheckOrigins(c.CORSOrigins); err != nil {
		return fmt.Errorf("[gateway] cors_origins: %w", err)
	}
	return c.checkHosts()
}

// Gateway is the data-plane handler.
type Gateway struct {
	cfg       Config
	byID      map[string]*Upstream
	byURI     map[string]*Upstream
	transport *http.Transport
	// up holds what forward derives from an Upstream once instead of per
	// request: the Authorization value and the metric children.
	up      map[*Upstream]*upstreamState
	log     *slog.Logger
	metrics *metrics
	// keys is the API key store; nil when keys are off (KeysFile "").
	keys *keys.Store
	// handler is the mux, behind CORS when origins are listed.
	handler http.Handler
	// peers are the other hosts' gateways by host id; peerIPs their
	// addresses, trusted with X-Forwarded-For; peerTransport carries the
	// job requests forwarded to them.
	peers         map[string]*peer
	peerIPs       map[netip.Addr]bool
	peerTransport *http.Transport
	// hostHeader is the X-Mortred-Host value of answers, nil without a
	// host id.
	hostHeader []string
	// draining is set once the gateway is stopping: /readyz answers 503
	// and every answer closes its connection.
	draining atomic.Bool
	// routesMu serializes routes file loads; routesGeneration is the
	// generation of the file in force (0 without one).
	routesMu         sync.Mutex
	routesGeneration atomic.Int64
}

// New validates cfg and builds the gateway. reg may be nil (a private
// registry is used); /metrics serves whatever reg gathers when it is a
// *prometheus.Registry.
func New(cfg Config, logger *slog.Logger, reg *prometheus.Registry) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	g := &Gateway{
		cfg:     cfg,
		byID:    make(map[string]*Upstream, len(cfg.Upstreams)),
		byURI:   make(map[string]*Upstream, len(cfg.Upstreams)),
		log:     logger,
		metrics: newMetrics(reg),
	}
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		g.byID[u.ID], g.byURI[u.URI] = u, u
	}
	// The transport is called directly, not through an http.Client: a
	// model server's redirect is an answer to pass through, never to
	// follow, and the Client's redirect and cookie machinery is per-request
	// cost for nothing.
	g.transport = httpx.NewTransport(httpx.TransportConfig{
		DialTimeout:           cfg.DialTimeout,
		IdleConnTimeout:       cfg.IdleConnTimeout,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
		MaxConnsPerHost:       cfg.MaxConnsPerModel,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		// net/http's 4 KiB, not the router's 1 KiB: the gateway holds no
		// crowd of idle streams, and a small body up to about 3.5 KiB
		// then leaves with its head in one write.
		ReadBufferSize:  4 << 10,
		WriteBufferSize: 4 << 10,
	})
	g.peers, g.peerIPs = newPeers(cfg.HostID, cfg.Peers)
	if len(g.peers) > 0 {
		g.peerTransport = httpx.NewTransport(httpx.TransportConfig{
			DialTimeout:           cfg.DialTimeout,
			IdleConnTimeout:       cfg.IdleConnTimeout,
			MaxIdleConnsPerHost:   maxIdleConnsPerHost,
			ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		})
	}
	if cfg.HostID != "" {
		g.hostHeader = []string{cfg.HostID}
	}
	g.up = make(map[*Upstream]*upstreamState, len(cfg.Upstreams))
	for _, u := range g.byID {
		g.up[u] = newUpstreamState(u, g.metrics)
	}
	if cfg.RoutesFile != "" {
		// A file that exists but does not parse is an error naming the
		// file and the reason: the gateway does not start on it.
		if err := g.loadRoutes(); err != nil {
			return nil, err
		}
	}
	if cfg.KeysFile != "" {
		// A file that cannot be read or parsed is an error naming file,
		// line and reason: the gateway does not start on it.
		ks, err := keys.Open(cfg.KeysFile, keys.Options{Product: keys.Gateway, Operator: cfg.Token, Registerer: reg, Log: logger})
		if err != nil {
			return nil, err
		}
		g.keys = ks
	}
	// CORS answers preflights before any auth: a browser sends no
	// Authorization header with them.
	h, err := httpx.CORS(cfg.CORSOrigins, g.routes(reg))
	if err != nil {
		return nil, err
	}
	g.handler = h
	return g, nil
}

// maxIdleConnsPerHost is generous: concurrent requests to one model each
// hold a connection, and re-dialling after a burst is waste.
const maxIdleConnsPerHost = 256

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.draining.Load() {
		// A balancer then opens a new connection for its next request,
		// to a host that is not stopping, instead of reusing this one
		// just as it closes (a POST sent on it would fail, not move).
		w.Header().Set("Connection", "close")
	}
	g.handler.ServeHTTP(w, r)
}

// Drain marks the gateway as stopping: /readyz answers 503 from now on
// and every answer closes its connection; requests are still served.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Keys is the API key store, nil when keys are off. Its Run must go on for
// the gateway's life (reload on change, usage series); SIGHUP calls Reload.
func (g *Gateway) Keys() *keys.Store { return g.keys }

// Close releases idle upstream connections.
func (g *Gateway) Close() {
	g.transport.CloseIdleConnections()
	if g.peerTransport != nil {
		g.peerTransport.CloseIdleConnections()
	}
}
