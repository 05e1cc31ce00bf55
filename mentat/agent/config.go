// Package agent is `mentatd agent`: it reads the container's MENTAT_*
// announcement once, registers with the node's daemon and keeps the
// registration alive across daemon restarts, optionally runs the engine as
// its actor, and watches /proc/net/tcp{,6} to tell the daemon when a
// port-form service is bound to one address only.
package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Config is the agent's configuration, read once at start.
type Config struct {
	// Group is MENTAT_GROUP, required.
	Group string
	// Services maps "openai" / "mcp" to what MENTAT_OPENAI_API and
	// MENTAT_MCP_API announce; absent when unset.
	Services map[string]wire.Service
	// Provider is MENTAT_MODEL_PROVIDER, lowercased; it is announced as the
	// openai service's provider (and unused without one).
	Provider string
	// Daemon is the daemon's host:port. Default 127.0.0.1:6380.
	Daemon string
	// Container names this agent. Default: the hostname.
	Container string
	// NodeIP is the node address to register under. Empty: the daemon's.
	NodeIP string
	// Command is the engine to run as the actor; empty runs none.
	Command []string
	// ActorName is the actor's name. Default: the command's base name.
	ActorName string
	// BindCheck is the bind check interval. Default 2 s.
	BindCheck time.Duration
	// BindWait is how long a port-form service may go without a listener
	// before service_never_listened is logged. Default 600 s.
	BindWait time.Duration
	// CallTimeout bounds one call to the daemon. Default 5 s.
	CallTimeout time.Duration
}

// FromEnv reads the agent's variables. Unlike most settings, a present but
// invalid value is an error: an agent that announced something other than
// what the operator wrote would mislead the router.
func FromEnv(env envconf.Env, command []string) (Config, error) {
	c := Config{Services: map[string]wire.Service{}, Command: command,
		BindCheck: 2 * time.Second, BindWait: 600 * time.Second, CallTimeout: 5 * time.Second}
	var ok bool
	if c.Group, ok = env.Value("MENTAT_GROUP"); !ok {
		return c, errors.New("MENTAT_GROUP is required: set it to the deployment's group name")
	}
	if err := checkName("MENTAT_GROUP", c.Group, 64, false); err != nil {
		return c, err
	}
	for name, v := range map[string]string{wire.ServiceOpenAI: "MENTAT_OPENAI_API", wire.ServiceMCP: "MENTAT_MCP_API"} {
		raw, ok := env.Value(v)
		if !ok {
			continue
		}
		s, err := wire.ParseEndpoint(raw)
		if err != nil {
			return c, fmt.Errorf("%s: %v", v, err)
		}
		c.Services[name] = s
	}
	if p, ok := env.Value("MENTAT_MODEL_PROVIDER"); ok {
		p = strings.ToLower(p)
		if err := checkName("MENTAT_MODEL_PROVIDER", p, 64, false); err != nil {
			return c, err
		}
		c.Provider = p
		if s, ok := c.Services[wire.ServiceOpenAI]; ok {
			s.Provider = p
			c.Services[wire.ServiceOpenAI] = s
		}
	}
	c.Daemon = env.String("MENTAT_DAEMON", "127.0.0.1:6380")
	if _, _, err := net.SplitHostPort(c.Daemon); err != nil {
		c.Daemon = net.JoinHostPort(strings.Trim(c.Daemon, "[]"), "6380")
	}
	if h, p, err := net.SplitHostPort(c.Daemon); err != nil || h == "" || !validPort(p) {
		return c, fmt.Errorf("MENTAT_DAEMON %q: want host:port of the node's daemon", c.Daemon)
	}
	host, _ := os.Hostname()
	c.Container = env.String("MENTAT_CONTAINER", host)
	if err := checkName("MENTAT_CONTAINER", c.Container, 128, true); err != nil {
		return c, err
	}
	if ip, ok := env.Value("MENTAT_NODE_IP"); ok {
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			return c, fmt.Errorf("MENTAT_NODE_IP %q is not an IP address", ip)
		}
		c.NodeIP = a.Unmap().String()
	}
	if len(command) > 0 {
		c.ActorName = env.String("MENTAT_ACTOR_NAME", filepath.Base(command[0]))
		if len(c.ActorName) > 128 || strings.ContainsFunc(c.ActorName, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return c, fmt.Errorf("MENTAT_ACTOR_NAME %q: at most 128 printable bytes", c.ActorName)
		}
	}
	c.BindCheck = env.Duration("MENTAT_BIND_CHECK_S", c.BindCheck)
	c.BindWait = env.Duration("MENTAT_BIND_WAIT_S", c.BindWait)
	return c, nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// checkName applies the daemon's rules for names, so that a bad value stops
// the agent here with the variable's name instead of as a 400 later.
func checkName(what, v string, max int, idChars bool) error {
	if len(v) > max {
		return fmt.Errorf("%s is %d bytes, at most %d", what, len(v), max)
	}
	for _, r := range v {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if idChars {
			ok = ok || r == '@' || r == ':' || r == '/'
		}
		if !ok {
			return fmt.Errorf("%s %q: character %q not allowed (letters, digits, '.', '_', '-')", what, v, r)
		}
	}
	return nil
}
