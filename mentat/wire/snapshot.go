package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Proto is the snapshot and announcement version our daemon writes.
const Proto = "0.99"

// Actor states.
const (
	ActorSpawning = "spawning"
	ActorRunning  = "running"
	ActorDead     = "dead"
)

// Service names an agent announces.
const (
	ServiceOpenAI = "openai"
	ServiceMCP    = "mcp"
)

// Snapshot is one node's /status document in the current ("0.99") shape.
// DecodeSnapshot also reads the older array shape into it.
type Snapshot struct {
	Proto    string           `json:"proto"`
	NodeID   string           `json:"node_id"`
	NodeIP   string           `json:"node_ip"`
	Hostname string           `json:"hostname,omitempty"`
	Addrs    []string         `json:"addrs"`
	Seq      int64            `json:"seq"`
	BootID   string           `json:"boot_id,omitempty"`
	Peers    map[string]Peer  `json:"peers"`
	Groups   map[string]Group `json:"groups"`
}

// Peer is a mesh member as a daemon reports it.
type Peer struct {
	NodeIP      string   `json:"node_ip"`
	LinkIP      string   `json:"link_ip"`
	Addrs       []string `json:"addrs"`
	ControlPort int      `json:"control_port,omitempty"`
	HTTPPort    int      `json:"http_port"`
	Alive       bool     `json:"alive"`
	Stale       bool     `json:"stale"`
}

// Group is one deployment: its agents (keyed by agent id) and actors (keyed
// by actor id).
type Group struct {
	Agents map[string]Agent `json:"agents"`
	Actors map[string]Actor `json:"actors"`
}

// Agent is a registered agent and the services it announces.
type Agent struct {
	NodeID    string             `json:"node_id"`
	NodeIP    string             `json:"node_ip"`
	Container string             `json:"container"`
	PID       int                `json:"pid"`
	Alive     bool               `json:"alive"`
	Services  map[string]Service `json:"services"`
}

// Service is an announced endpoint. An empty Host is the port form (resolved
// by the router against every address of the node); a non-empty Host is the
// URL form, used verbatim.
type Service struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Path     string `json:"path"`
	Provider string `json:"provider"`
	Note     string `json:"note"`
}

// Actor is one process of a group.
type Actor struct {
	Name   string `json:"name"`
	NodeID string `json:"node_id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	PID    int    `json:"pid"`
}

// PortForm reports whether the service leaves the host to the router.
func (s Service) PortForm() bool { return s.Host == "" }

// URL returns the URL-form endpoint ("http://host:port/path"), or the URL on
// host for a port-form service.
func (s Service) URL(host string) string {
	if !s.PortForm() {
		host = s.Host
	}
	u := url.URL{Scheme: "http", Host: joinHostPort(host, s.Port), Path: s.Path}
	return u.String()
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(port)
}

// NodeID is the id a daemon derives from its node address: the hex encoding
// of "mentat:" + ip.
func NodeID(ip string) string { return hex.EncodeToString([]byte("mentat:" + ip)) }

// MaxSnapshotBytes bounds what a reader accepts from one /status answer.
const MaxSnapshotBytes = 16 << 20

// DecodeSnapshot reads a /status document in either shape. Unknown fields
// are ignored.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	if len(data) > MaxSnapshotBytes {
		return nil, fmt.Errorf("snapshot is %d bytes, over the %d byte limit", len(data), MaxSnapshotBytes)
	}
	var top struct {
		Proto    string                     `json:"proto"`
		NodeID   string                     `json:"node_id"`
		NodeIP   string                     `json:"node_ip"`
		Hostname string                     `json:"hostname"`
		Addrs    []string                   `json:"addrs"`
		Seq      int64                      `json:"seq"`
		BootID   string                     `json:"boot_id"`
		Peers    json.RawMessage            `json:"peers"`
		Groups   map[string]json.RawMessage `json:"groups"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	s := &Snapshot{
		Proto: top.Proto, NodeID: top.NodeID, NodeIP: top.NodeIP, Hostname: top.Hostname,
		Addrs: top.Addrs, Seq: top.Seq, BootID: top.BootID,
		Peers:  map[string]Peer{},
		Groups: make(map[string]Group, len(top.Groups)),
	}
	if err := decodePeers(top.Peers, s.Peers); err != nil {
		return nil, err
	}
	for name, raw := range top.Groups {
		g, err := decodeGroup(raw)
		if err != nil {
			return nil, fmt.Errorf("snapshot: group %q: %w", name, err)
		}
		s.Groups[name] = g
	}
	return s, nil
}

// decodePeers accepts a map keyed by node id or an array of peers with an id.
func decodePeers(raw json.RawMessage, into map[string]Peer) error {
	switch firstByte(raw) {
	case 0, 'n':
		return nil
	case '{':
		if err := json.Unmarshal(raw, &into); err != nil {
			return fmt.Errorf("snapshot: peers: %w", err)
		}
	case '[':
		var list []struct {
			ID string `json:"id"`
			Peer
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("snapshot: peers: %w", err)
		}
		for i, p := range list {
			id := p.ID
			if id == "" {
				id = NodeID(p.NodeIP)
			}
			if _, dup := into[id]; dup {
				id = id + "#" + strconv.Itoa(i)
			}
			into[id] = p.Peer
		}
	default:
		return errors.New("snapshot: peers is neither an object nor an array")
	}
	return nil
}

func decodeGroup(raw json.RawMessage) (Group, error) {
	var g struct {
		Agents json.RawMessage `json:"agents"`
		Actors json.RawMessage `json:"actors"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		return Group{}, err
	}
	out := Group{Agents: map[string]Agent{}, Actors: map[string]Actor{}}
	switch firstByte(g.Agents) {
	case 0, 'n':
	case '{':
		if err := json.Unmarshal(g.Agents, &out.Agents); err != nil {
			return Group{}, fmt.Errorf("agents: %w", err)
		}
	case '[':
		var list []legacyAgent
		if err := json.Unmarshal(g.Agents, &list); err != nil {
			return Group{}, fmt.Errorf("agents: %w", err)
		}
		for i, a := range list {
			id := a.ID
			if id == "" {
				id = "agent#" + strconv.Itoa(i)
			}
			out.Agents[id] = a.normalise()
		}
	default:
		return Group{}, errors.New("agents is neither an object nor an array")
	}
	switch firstByte(g.Actors) {
	case 0, 'n':
	case '{':
		if err := json.Unmarshal(g.Actors, &out.Actors); err != nil {
			return Group{}, fmt.Errorf("actors: %w", err)
		}
		for id, a := range out.Actors {
			out.Actors[id] = normaliseActor(a)
		}
	case '[':
		var list []struct {
			ID string `json:"id"`
			Actor
		}
		if err := json.Unmarshal(g.Actors, &list); err != nil {
			return Group{}, fmt.Errorf("actors: %w", err)
		}
		for i, a := range list {
			id := a.ID
			if id == "" {
				id = "actor#" + strconv.Itoa(i)
			}
			out.Actors[id] = normaliseActor(a.Actor)
		}
	default:
		return Group{}, errors.New("actors is neither an object nor an array")
	}
	return out, nil
}

// normaliseActor splits the older "dead (reason)" state spelling.
func normaliseActor(a Actor) Actor {
	if strings.HasPrefix(a.State, ActorDead+" (") && strings.HasSuffix(a.State, ")") {
		if a.Reason == "" {
			a.Reason = a.State[len(ActorDead)+2 : len(a.State)-1]
		}
		a.State = ActorDead
	}
	return a
}

// legacyAgent is the older agent shape: URL-form services as plain URLs,
// port-form ones apart, notes apart, the provider at the top level.
type legacyAgent struct {
	ID            string            `json:"id"`
	NodeID        string            `json:"node_id"`
	NodeIP        string            `json:"node_ip"`
	Container     string            `json:"container"`
	PID           int               `json:"pid"`
	Alive         bool              `json:"alive"`
	Provider      string            `json:"provider"`
	Services      map[string]string `json:"services"`
	ServicesPorts map[string]struct {
		Port int    `json:"port"`
		Path string `json:"path"`
	} `json:"services_ports"`
	ServiceNotes map[string]string `json:"service_notes"`
}

func (l legacyAgent) normalise() Agent {
	a := Agent{NodeID: l.NodeID, NodeIP: l.NodeIP, Container: l.Container, PID: l.PID, Alive: l.Alive,
		Services: map[string]Service{}}
	for name, raw := range l.Services {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		port, _ := strconv.Atoi(u.Port())
		if port == 0 {
			port = 80
		}
		a.Services[name] = Service{Host: u.Hostname(), Port: port, Path: u.EscapedPath()}
	}
	for name, sp := range l.ServicesPorts {
		a.Services[name] = Service{Port: sp.Port, Path: sp.Path}
	}
	for name, svc := range a.Services {
		svc.Note = l.ServiceNotes[name]
		if name == ServiceOpenAI {
			svc.Provider = strings.ToLower(l.Provider)
		}
		a.Services[name] = svc
	}
	return a
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
