package gateway

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/internal/httpx"
	"github.com/fe64bb06/frontdoor/mortred/config"
)

// Environment variables the gateway reads.
const (
	EnvGatewayToken = "MORTRED_GATEWAY_AUTH_TOKEN"
	EnvAPIToken     = "MORTRED_API_TOKEN"
	EnvMetricsToken = "MORTRED_METRICS_TOKEN"
)

// Setup is everything the gateway process needs, from conf/mortred.toml, the
// catalog and the environment.
type Setup struct {
	Config Config
	// Addr is the listen address after MORTRED_LISTEN_HOST/PORT overrides.
	Addr string
	// Drain is how long a stopping gateway serves on with /readyz 503
	// before it stops accepting; ShutdownTimeout bounds the wait for
	// in-flight requests after that.
	Drain, ShutdownTimeout time.Duration
}

// FromConfig builds the gateway's setup and applies the fail-closed rules:
// an inference token, a distinct metrics token, and no wildcard bind unless
// MORTRED_EXPOSE=docker|unsafe.
func FromConfig(cp *config.ControlPlane, cat *config.Catalog, env envconf.Env) (*Setup, error) {
	g := cp.Gateway
	host := env.String(config.EnvListenHost, g.Host)
	port := env.Port(config.EnvListenPort, g.Port, false)
	if err := config.CheckListen(host, true, env.String(config.EnvExpose, "")); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	cfg := Config{
		Token:                 env.String(EnvGatewayToken, env.String(EnvAPIToken, "")),
		MetricsToken:          env.String(EnvMetricsToken, ""),
		MaxBody:               int64(g.RequestSizeLimitMB) << 20,
		DialTimeout:           g.UpstreamConnectTimeout(),
		ResponseHeaderTimeout: g.UpstreamResponseTimeout(),
		IdleConnTimeout:       g.UpstreamIdleTimeout(),
		Edge: httpx.Limits{
			ReadHeaderTimeout: g.ReadHeaderTimeout(),
			BodyTimeout:       g.BodyTimeout(),
			IdleTimeout:       g.IdleTimeout(),
			WriteTimeout:      g.WriteTimeout(),
			MaxHeaderBytes:    g.MaxHeaderBytes,
			MaxConns:          g.MaxConnections,
		},
		KeysFile:    g.KeysFile,
		CORSOrigins: g.CORSOrigins,
		HostID:      env.String(EnvHostID, g.HostID),
		Peers:       g.Peers,
		RoutesFile:  env.String(EnvRoutesFile, ""),
	}
	// A model server takes MORTRED_AUTH_TOKEN over its file's auth_token;
	// the gateway resolves the model's token the same way.
	modelToken := env.String(config.EnvAuthToken, "")
	for _, e := range cat.Entries {
		tok := e.Config.AuthToken
		if modelToken != "" {
			tok = modelToken
		}
		cfg.Upstreams = append(cfg.Upstreams, Upstream{ID: e.ID, URI: e.URI, Addr: upstreamAddr(e), Token: tok})
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return &Setup{Config: cfg, Addr: net.JoinHostPort(host, strconv.Itoa(port)), Drain: g.Drain(), ShutdownTimeout: g.ShutdownTimeout()}, nil
}

// upstreamAddr is where the gateway reaches a model: its own listen host,
// or loopback when the model binds a wildcard.
func upstreamAddr(e *config.Entry) string {
	host := e.Host
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(e.Port))
}
