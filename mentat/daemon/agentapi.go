package daemon

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// The agent registration API (docs/mentatd.md). Every call is a POST of one
// JSON object; every answer is JSON, an error being {"error": "..."} with
// 400 (bad input), 404 (unknown agent: register again) or 409/413/503.
const (
	PathRegister   = "/v1/agent/register"
	PathHeartbeat  = "/v1/agent/heartbeat"
	PathActor      = "/v1/agent/actor"
	PathNote       = "/v1/agent/note"
	PathDeregister = "/v1/agent/deregister"
)

// Limits on what one agent may register.
const (
	MaxBodyBytes      = 64 << 10
	MaxAgents         = 1024
	MaxActorsPerAgent = 64
	MaxServices       = 8
	maxIDLen          = 256
	maxNameLen        = 128
	maxNoteLen        = 512
	maxReasonLen      = 1024
	maxHostLen        = 253
	maxPathLen        = 256
	maxProviderLen    = 64
	maxGroupLen       = 64
	maxServiceNameLen = 32
)

// RegisterRequest registers an agent, or replaces an existing registration
// with the same id: it carries the agent's whole state, so an agent that
// lost its daemon (restart, timeout) sends it again as is.
type RegisterRequest struct {
	// Group is the deployment name: letters, digits, '.', '_', '-'.
	Group string `json:"group"`
	// AgentID is optional; empty means "<group>@<container>@<node_ip>".
	AgentID   string `json:"agent_id,omitempty"`
	Container string `json:"container"`
	PID       int    `json:"pid"`
	// NodeIP is optional; empty means the daemon's node_ip.
	NodeIP string `json:"node_ip,omitempty"`
	// Services by name ("openai", "mcp"): port form (empty host) or URL form.
	Services map[string]wire.Service `json:"services,omitempty"`
	// Actors by actor id, as the agent knows them now.
	Actors map[string]ActorState `json:"actors,omitempty"`
}

// RegisterResponse tells the agent who it is to this daemon.
type RegisterResponse struct {
	AgentID string `json:"agent_id"`
	NodeID  string `json:"node_id"`
	NodeIP  string `json:"node_ip"`
	BootID  string `json:"boot_id"`
	// HeartbeatS is how often the agent should heartbeat, in seconds (a
	// third of the daemon's agent timeout).
	HeartbeatS float64 `json:"heartbeat_s"`
}

// AgentRef names a registered agent (heartbeat, deregister).
type AgentRef struct {
	AgentID string `json:"agent_id"`
}

// HeartbeatResponse carries the daemon's boot id; a change means the
// daemon restarted and the agent must register again.
type HeartbeatResponse struct {
	BootID string `json:"boot_id"`
}

// ActorState is one actor's state as its agent reports it.
type ActorState struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	PID    int    `json:"pid,omitempty"`
}

// ActorUpdate sets one actor's state.
type ActorUpdate struct {
	AgentID string `json:"agent_id"`
	ActorID string `json:"actor_id"`
	ActorState
}

// NoteUpdate sets (or, empty, clears) a service's note.
type NoteUpdate struct {
	AgentID string `json:"agent_id"`
	Service string `json:"service"`
	Note    string `json:"note"`
}

// Validate checks a registration and normalises it (lowercased provider,
// canonical node_ip). The error text is what the agent gets back.
func (r *RegisterRequest) Validate() error {
	if err := checkToken("group", r.Group, maxGroupLen, isGroupRune); err != nil {
		return err
	}
	if r.AgentID != "" {
		if err := checkToken("agent_id", r.AgentID, maxIDLen, isIDRune); err != nil {
			return err
		}
	}
	if err := checkToken("container", r.Container, maxNameLen, isIDRune); err != nil {
		return err
	}
	if r.PID < 0 || r.PID > 1<<31-1 {
		return fmt.Errorf("pid %d out of range", r.PID)
	}
	if r.NodeIP != "" {
		ip, err := netip.ParseAddr(r.NodeIP)
		if err != nil || ip.Zone() != "" {
			return fmt.Errorf("node_ip %q is not an IP address", r.NodeIP)
		}
		r.NodeIP = ip.Unmap().String()
	}
	if len(r.Services) > MaxServices {
		return fmt.Errorf("%d services, at most %d", len(r.Services), MaxServices)
	}
	for name, s := range r.Services {
		if err := checkToken("service name", name, maxServiceNameLen, isGroupRune); err != nil {
			return err
		}
		if err := validateService(&s); err != nil {
			return fmt.Errorf("service %q: %v", name, err)
		}
		r.Services[name] = s
	}
	if len(r.Actors) > MaxActorsPerAgent {
		return fmt.Errorf("%d actors, at most %d per agent", len(r.Actors), MaxActorsPerAgent)
	}
	for id, a := range r.Actors {
		if err := checkToken("actor_id", id, maxIDLen, isIDRune); err != nil {
			return err
		}
		if err := a.Validate(); err != nil {
			return fmt.Errorf("actor %q: %v", id, err)
		}
	}
	return nil
}

func validateService(s *wire.Service) error {
	if s.Port < 1 || s.Port > 65535 {
		return fmt.Errorf("port %d out of range 1-65535", s.Port)
	}
	if s.Host != "" {
		if len(s.Host) > maxHostLen || strings.ContainsAny(s.Host, "/?#@ []") || !printable(s.Host) {
			return fmt.Errorf("host %q is not a host name or address", s.Host)
		}
	}
	if s.Path != "" && (s.Path[0] != '/' || len(s.Path) > maxPathLen || strings.ContainsAny(s.Path, "?# ") || !printable(s.Path)) {
		return fmt.Errorf("path %q: want empty or /path, at most %d bytes", s.Path, maxPathLen)
	}
	s.Provider = strings.ToLower(s.Provider)
	if err := checkOptional("provider", s.Provider, maxProviderLen); err != nil {
		return err
	}
	return checkOptional("note", s.Note, maxNoteLen)
}

// Validate checks one actor state.
func (a ActorState) Validate() error {
	switch a.State {
	case wire.ActorSpawning, wire.ActorRunning, wire.ActorDead:
	default:
		return fmt.Errorf("state %q: want spawning, running or dead", a.State)
	}
	if a.PID < 0 || a.PID > 1<<31-1 {
		return fmt.Errorf("pid %d out of range", a.PID)
	}
	if err := checkOptional("name", a.Name, maxNameLen); err != nil {
		return err
	}
	return checkOptional("reason", a.Reason, maxReasonLen)
}

// Validate checks an actor update.
func (u ActorUpdate) Validate() error {
	if err := checkToken("agent_id", u.AgentID, maxIDLen, isIDRune); err != nil {
		return err
	}
	if err := checkToken("actor_id", u.ActorID, maxIDLen, isIDRune); err != nil {
		return err
	}
	return u.ActorState.Validate()
}

// Validate checks a note update.
func (u NoteUpdate) Validate() error {
	if err := checkToken("agent_id", u.AgentID, maxIDLen, isIDRune); err != nil {
		return err
	}
	if err := checkToken("service", u.Service, maxServiceNameLen, isGroupRune); err != nil {
		return err
	}
	return checkOptional("note", u.Note, maxNoteLen)
}

// Validate checks an agent reference.
func (r AgentRef) Validate() error {
	return checkToken("agent_id", r.AgentID, maxIDLen, isIDRune)
}

func checkToken(what, v string, max int, ok func(rune) bool) error {
	if v == "" {
		return fmt.Errorf("%s is required", what)
	}
	if len(v) > max {
		return fmt.Errorf("%s is %d bytes, at most %d", what, len(v), max)
	}
	for _, r := range v {
		if !ok(r) {
			return fmt.Errorf("%s %q: character %q not allowed", what, v, r)
		}
	}
	return nil
}

func checkOptional(what, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%s is %d bytes, at most %d", what, len(v), max)
	}
	if !printable(v) {
		return fmt.Errorf("%s must be printable UTF-8", what)
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func isGroupRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// isIDRune also allows the separators agent ids and actor ids use
// ("glm@glm@10.0.0.1", "a:9f01", IPv6 node addresses).
func isIDRune(r rune) bool { return isGroupRune(r) || r == '@' || r == ':' || r == '/' }
