// Package daemon is `mentatd daemon`: one node's view of the cluster. It keeps
// the registry of the agents on its node and their actors, serves it on
// GET /status and GET /events (docs/mentat-wire.md), takes agent
// registrations over a small JSON API (docs/mentatd.md), announces itself over
// UDP, and polls its mesh peers.
package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path"
	"strconv"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Config is the daemon's configuration. FromEnv fills it from MENTAT_*;
// Defaults gives every field its default.
type Config struct {
	// HTTPHost is the bind host of the HTTP server. Default 0.0.0.0.
	HTTPHost string
	// HTTPPort is the HTTP port. Default 6380; 0 picks a free port (the
	// chosen port is logged as http_listening and announced).
	HTTPPort int
	// NodeIP is the node's own address. Empty: the first ranked address.
	NodeIP string
	// AnnounceIfaces are interface-name globs; their order ranks the node's
	// addresses. Empty: every up non-loopback interface (loopback only when
	// nothing else is up).
	AnnounceIfaces []string
	// AnnounceInterval is the time between announcements. Default 5 s.
	AnnounceInterval time.Duration
	// AnnouncePort is the UDP port broadcasts go to, and the default port of
	// AnnounceAddrs entries. Default 6382; 0 turns broadcasting off.
	AnnouncePort int
	// AnnounceAddrs are host:port destinations announcements are unicast to.
	AnnounceAddrs []string
	// Secret signs announcements; empty sends them unsigned.
	Secret []byte
	// Universe is the cluster name carried in announcements. Default "default".
	Universe string
	// Peers are mesh peer daemon HTTP addresses (host:port).
	Peers []string
	// PeerPoll is the interval between /status polls of each peer. Default 5 s.
	// A peer not heard from for three intervals is stale.
	PeerPoll time.Duration
	// AgentTimeout is how long an agent may go without a heartbeat before it
	// is marked alive:false. It is removed after four times this. Default 15 s.
	AgentTimeout time.Duration
	// PingIdle is how long an /events stream may be silent before the
	// daemon pings. Default 15 s.
	PingIdle time.Duration
	// EventQueue bounds the frames queued for one /events client; a client
	// that falls this far behind is dropped. Default 256.
	EventQueue int
	// Hostname is reported in /status. Default os.Hostname().
	Hostname string
}

// Defaults returns a Config with every default applied.
func Defaults() Config {
	host, _ := os.Hostname()
	return Config{
		HTTPHost:         "0.0.0.0",
		HTTPPort:         6380,
		AnnounceInterval: 5 * time.Second,
		AnnouncePort:     6382,
		Universe:         wire.DefaultUniverse,
		PeerPoll:         5 * time.Second,
		AgentTimeout:     15 * time.Second,
		PingIdle:         15 * time.Second,
		EventQueue:       256,
		Hostname:         host,
	}
}

// FromEnv reads the MENTAT_* variables over Defaults. It fails only where the
// manual says the process must not start: an unreadable or empty
// MENTAT_SECRET_FILE, or a malformed address.
func FromEnv(env envconf.Env) (Config, error) {
	c := Defaults()
	c.HTTPHost = env.String("MENTAT_HTTP_HOST", c.HTTPHost)
	c.HTTPPort = env.Port("MENTAT_HTTP_PORT", c.HTTPPort, true)
	c.NodeIP = env.String("MENTAT_NODE_IP", "")
	c.AnnounceIfaces = env.List("MENTAT_ANNOUNCE_IFACES", nil)
	c.AnnounceInterval = env.Duration("MENTAT_ANNOUNCE_INTERVAL_S", c.AnnounceInterval)
	c.AnnouncePort = env.Port("MENTAT_ANNOUNCE_PORT", c.AnnouncePort, true)
	c.AnnounceAddrs = env.List("MENTAT_ANNOUNCE_ADDR", nil)
	c.Universe = env.String("MENTAT_UNIVERSE", c.Universe)
	c.Peers = env.List("MENTAT_PEERS", nil)
	c.PeerPoll = env.Duration("MENTAT_PEER_POLL_S", c.PeerPoll)
	c.AgentTimeout = env.Duration("MENTAT_AGENT_TIMEOUT_S", c.AgentTimeout)
	if file, ok := env.Value("MENTAT_SECRET_FILE"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return c, fmt.Errorf("MENTAT_SECRET_FILE: %v; fix the path or unset it", err)
		}
		key := wire.TrimKey(string(b))
		if key == "" {
			return c, fmt.Errorf("MENTAT_SECRET_FILE %s is empty; put the cluster secret in it or unset it", file)
		}
		c.Secret = []byte(key)
	} else if s, ok := env.Value("MENTAT_SECRET"); ok {
		c.Secret = []byte(wire.TrimKey(s))
	}
	return c, c.Validate()
}

// Validate checks the configuration and normalises address lists (a missing
// port in AnnounceAddrs takes AnnouncePort, or 6382 when that is 0).
func (c *Config) Validate() error {
	if c.HTTPPort < 0 || c.HTTPPort > 65535 {
		return fmt.Errorf("HTTP port %d out of range", c.HTTPPort)
	}
	if c.NodeIP != "" {
		ip, err := netip.ParseAddr(c.NodeIP)
		if err != nil {
			return fmt.Errorf("MENTAT_NODE_IP %q is not an IP address", c.NodeIP)
		}
		c.NodeIP = ip.Unmap().String()
	}
	for _, g := range c.AnnounceIfaces {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("MENTAT_ANNOUNCE_IFACES: bad glob %q", g)
		}
	}
	port := c.AnnouncePort
	if port == 0 {
		port = 6382
	}
	for i, a := range c.AnnounceAddrs {
		hp, err := withDefaultPort(a, port)
		if err != nil {
			return fmt.Errorf("MENTAT_ANNOUNCE_ADDR: %v", err)
		}
		c.AnnounceAddrs[i] = hp
	}
	for i, p := range c.Peers {
		hp, err := withDefaultPort(p, 6380)
		if err != nil {
			return fmt.Errorf("MENTAT_PEERS: %v", err)
		}
		c.Peers[i] = hp
	}
	if c.AnnounceInterval <= 0 || c.PeerPoll <= 0 || c.AgentTimeout <= 0 || c.PingIdle <= 0 {
		return errors.New("intervals must be positive")
	}
	if c.EventQueue <= 0 {
		c.EventQueue = 256
	}
	if c.Universe == "" {
		c.Universe = wire.DefaultUniverse
	}
	return nil
}

// withDefaultPort accepts host, host:port, [v6] or [v6]:port.
func withDefaultPort(a string, def int) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		host, port = a, strconv.Itoa(def)
		if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
			host = host[1 : len(host)-1]
		}
	}
	n, perr := strconv.Atoi(port)
	if host == "" || perr != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: want host or host:port", a)
	}
	return net.JoinHostPort(host, port), nil
}
