package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Error kinds the API maps to status codes.
var (
	// ErrUnknownAgent: the agent is not registered (or was lost); it must
	// register again. 404.
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrConflict: the request clashes with another agent's state. 409.
	ErrConflict = errors.New("conflict")
	// ErrFull: a registry limit is reached. 503.
	ErrFull = errors.New("registry full")
)

// registry is the node's state: who the node is, its agents and their
// actors, and its mesh peers. Every change bumps seq and publishes one event
// frame, under the same lock that snapshots take, so an /events client sees
// its snapshot and then exactly the events after it.
type registry struct {
	mu       sync.Mutex
	hub      *hub
	now      func() time.Time
	timeout  time.Duration
	bootID   string
	hostname string
	fixedIP  string // MENTAT_NODE_IP, or empty
	nodeIP   string
	addrs    []string
	seq      int64
	agents   map[string]*agentEntry
	peers    map[string]wire.Peer
}

type agentEntry struct {
	group    string
	agent    wire.Agent
	actors   map[string]wire.Actor
	lastBeat time.Time
}

func newRegistry(h *hub, bootID, hostname, fixedIP string, timeout time.Duration) *registry {
	r := &registry{hub: h, now: time.Now, timeout: timeout, bootID: bootID, hostname: hostname,
		fixedIP: fixedIP, nodeIP: fixedIP, agents: map[string]*agentEntry{}, peers: map[string]wire.Peer{}}
	if r.nodeIP == "" {
		r.nodeIP = "127.0.0.1"
	}
	return r
}

func (r *registry) nodeID() string { return wire.NodeID(r.nodeIP) }

// node returns the node's identity and address ranking.
func (r *registry) node() (nodeID, nodeIP string, addrs []string, seq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodeID(), r.nodeIP, slices.Clone(r.addrs), r.seq
}

// snapshot returns the /status document; group, when non-empty, scopes it
// to that group.
func (r *registry) snapshot(group string) *wire.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshotLocked(group)
}

func (r *registry) snapshotLocked(group string) *wire.Snapshot {
	s := &wire.Snapshot{Proto: wire.Proto, NodeID: r.nodeID(), NodeIP: r.nodeIP, Hostname: r.hostname,
		Addrs: slices.Clone(r.addrs), Seq: r.seq, BootID: r.bootID,
		Peers: maps.Clone(r.peers), Groups: map[string]wire.Group{}}
	if s.Addrs == nil {
		s.Addrs = []string{}
	}
	for _, e := range r.agents {
		if group != "" && e.group != group {
			continue
		}
		if _, ok := s.Groups[e.group]; !ok {
			s.Groups[e.group] = r.groupLocked(e.group)
		}
	}
	return s
}

func (r *registry) groupLocked(name string) wire.Group {
	g := wire.Group{Agents: map[string]wire.Agent{}, Actors: map[string]wire.Actor{}}
	for id, e := range r.agents {
		if e.group != name {
			continue
		}
		g.Agents[id] = cloneAgent(e.agent)
		for aid, a := range e.actors {
			g.Actors[aid] = a
		}
	}
	return g
}

func cloneAgent(a wire.Agent) wire.Agent {
	a.Services = maps.Clone(a.Services)
	return a
}

// subscribe returns the snapshot frame and a subscription that receives
// every event after it.
func (r *registry) subscribe() ([]byte, *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, _ := json.Marshal(r.snapshotLocked(""))
	frame, _ := json.Marshal(wire.Event{Type: wire.EventSnapshot, Seq: r.seq, Data: data})
	return frame, r.hub.subscribe()
}

// emitLocked bumps seq and publishes one event.
func (r *registry) emitLocked(typ string, ops []wire.PatchOp) {
	r.seq++
	ev := wire.Event{Type: typ, Seq: r.seq, TsMs: r.now().UnixMilli(), Node: r.nodeID(), Patch: ops}
	frame, err := json.Marshal(ev)
	if err != nil {
		return // our own types always marshal
	}
	r.hub.publish(frame)
}

func setOp(value any, at ...string) wire.PatchOp {
	b, _ := json.Marshal(value)
	return wire.PatchOp{At: at, Value: b}
}

func removeOp(at ...string) wire.PatchOp { return wire.PatchOp{At: at} }

// groupOpLocked is the patch that brings a whole group up to date: its new
// value, or its removal when it has no agents left.
func (r *registry) groupOpLocked(name string) wire.PatchOp {
	for _, e := range r.agents {
		if e.group == name {
			return setOp(r.groupLocked(name), "groups", name)
		}
	}
	return removeOp("groups", name)
}

// register adds or replaces an agent with its whole state.
func (r *registry) register(req RegisterRequest, heartbeat time.Duration) (RegisterResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	nodeIP := req.NodeIP
	if nodeIP == "" {
		nodeIP = r.nodeIP
	}
	id := req.AgentID
	if id == "" {
		id = req.Group + "@" + req.Container + "@" + nodeIP
		if len(id) > maxIDLen {
			return RegisterResponse{}, fmt.Errorf("%w: agent id %q is over %d bytes; set a shorter container name", ErrConflict, id, maxIDLen)
		}
	}
	old, exists := r.agents[id]
	if !exists && len(r.agents) >= MaxAgents {
		return RegisterResponse{}, fmt.Errorf("%w: %d agents registered, the limit", ErrFull, MaxAgents)
	}
	for aid := range req.Actors {
		if owner := r.actorOwnerLocked(req.Group, aid); owner != "" && owner != id {
			return RegisterResponse{}, fmt.Errorf("%w: actor %q in group %q belongs to agent %q", ErrConflict, aid, req.Group, owner)
		}
	}
	nodeID := wire.NodeID(nodeIP)
	e := &agentEntry{group: req.Group, lastBeat: r.now(), actors: map[string]wire.Actor{},
		agent: wire.Agent{NodeID: nodeID, NodeIP: nodeIP, Container: req.Container, PID: req.PID, Alive: true,
			Services: map[string]wire.Service{}}}
	for name, s := range req.Services {
		e.agent.Services[name] = s
	}
	for aid, a := range req.Actors {
		e.actors[aid] = wire.Actor{Name: a.Name, NodeID: nodeID, State: a.State, Reason: a.Reason, PID: a.PID}
	}
	r.agents[id] = e
	var ops []wire.PatchOp
	if exists && old.group != req.Group {
		ops = append(ops, r.groupOpLocked(old.group))
	}
	ops = append(ops, r.groupOpLocked(req.Group))
	r.emitLocked(wire.EventAgentRegister, ops)
	return RegisterResponse{AgentID: id, NodeID: nodeID, NodeIP: nodeIP, BootID: r.bootID,
		HeartbeatS: heartbeat.Seconds()}, nil
}

func (r *registry) actorOwnerLocked(group, actorID string) string {
	for id, e := range r.agents {
		if e.group == group {
			if _, ok := e.actors[actorID]; ok {
				return id
			}
		}
	}
	return ""
}

// liveLocked returns a registered agent that is still alive; a lost agent
// must register again with its whole state.
func (r *registry) liveLocked(id string) (*agentEntry, error) {
	e, ok := r.agents[id]
	if !ok {
		return nil, fmt.Errorf("%w %q: register again", ErrUnknownAgent, id)
	}
	if !e.agent.Alive {
		return nil, fmt.Errorf("%w %q: it missed its heartbeats and was marked lost; register again", ErrUnknownAgent, id)
	}
	return e, nil
}

func (r *registry) heartbeat(id string) (HeartbeatResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.liveLocked(id)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	e.lastBeat = r.now()
	return HeartbeatResponse{BootID: r.bootID}, nil
}

func (r *registry) setActor(u ActorUpdate) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.liveLocked(u.AgentID)
	if err != nil {
		return err
	}
	if owner := r.actorOwnerLocked(e.group, u.ActorID); owner != "" && owner != u.AgentID {
		return fmt.Errorf("%w: actor %q in group %q belongs to agent %q", ErrConflict, u.ActorID, e.group, owner)
	}
	old, exists := e.actors[u.ActorID]
	if !exists && len(e.actors) >= MaxActorsPerAgent {
		return fmt.Errorf("%w: agent has %d actors, the limit", ErrFull, MaxActorsPerAgent)
	}
	a := wire.Actor{Name: u.Name, NodeID: e.agent.NodeID, State: u.State, Reason: u.Reason, PID: u.PID}
	e.lastBeat = r.now()
	if exists && old == a {
		return nil
	}
	e.actors[u.ActorID] = a
	r.emitLocked("actor_"+u.State, []wire.PatchOp{setOp(a, "groups", e.group, "actors", u.ActorID)})
	return nil
}

func (r *registry) setNote(u NoteUpdate) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.liveLocked(u.AgentID)
	if err != nil {
		return err
	}
	s, ok := e.agent.Services[u.Service]
	if !ok {
		return fmt.Errorf("%w: agent %q announced no service %q", ErrConflict, u.AgentID, u.Service)
	}
	e.lastBeat = r.now()
	if s.Note == u.Note {
		return nil
	}
	s.Note = u.Note
	e.agent.Services[u.Service] = s
	r.emitLocked(wire.EventServiceNote, []wire.PatchOp{setOp(cloneAgent(e.agent), "groups", e.group, "agents", u.AgentID)})
	return nil
}

// deregister removes an agent and its actors at once.
func (r *registry) deregister(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.agents[id]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownAgent, id)
	}
	delete(r.agents, id)
	r.emitLocked(wire.EventAgentDead, []wire.PatchOp{r.groupOpLocked(e.group)})
	return nil
}

// reap marks agents silent for the timeout as lost (alive:false, their
// actors dead) and removes those silent for four timeouts.
func (r *registry) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, id := range slices.Sorted(maps.Keys(r.agents)) {
		e := r.agents[id]
		silent := now.Sub(e.lastBeat)
		switch {
		case silent >= 4*r.timeout:
			delete(r.agents, id)
			r.emitLocked(wire.EventAgentDead, []wire.PatchOp{r.groupOpLocked(e.group)})
		case silent >= r.timeout && e.agent.Alive:
			e.agent.Alive = false
			reason := fmt.Sprintf("agent lost: no heartbeat for %s", silent.Round(time.Millisecond))
			for aid, a := range e.actors {
				if a.State != wire.ActorDead {
					a.State, a.Reason = wire.ActorDead, reason
					e.actors[aid] = a
				}
			}
			r.emitLocked(wire.EventAgentLost, []wire.PatchOp{r.groupOpLocked(e.group)})
		}
	}
}

// setAddrs updates the node's address ranking (and node_ip, unless fixed).
func (r *registry) setAddrs(addrs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Equal(addrs, r.addrs) && r.addrs != nil {
		return
	}
	r.addrs = slices.Clone(addrs)
	if r.addrs == nil {
		r.addrs = []string{}
	}
	ops := []wire.PatchOp{setOp(r.addrs, "addrs")}
	if r.fixedIP == "" && len(addrs) > 0 && addrs[0] != r.nodeIP {
		// node_ip follows the best address; agents that took the daemon's
		// node_ip re-register when the boot id or their id goes away.
		r.nodeIP = addrs[0]
		ops = append(ops, setOp(r.nodeIP, "node_ip"), setOp(r.nodeID(), "node_id"))
	}
	r.emitLocked("node_addrs", ops)
}

// setPeer adds or updates a mesh peer; remove deletes it.
func (r *registry) setPeer(id string, p wire.Peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, exists := r.peers[id]
	if exists && peerEqual(old, p) {
		return
	}
	r.peers[id] = p
	typ := "node_update"
	switch {
	case p.Alive && (!exists || !old.Alive):
		typ = wire.EventNodeJoin
	case !p.Alive && exists && old.Alive:
		typ = wire.EventNodeLeave
	}
	r.emitLocked(typ, []wire.PatchOp{setOp(p, "peers", id)})
}

func (r *registry) removePeer(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.peers[id]; !ok {
		return
	}
	delete(r.peers, id)
	r.emitLocked(wire.EventNodeLeave, []wire.PatchOp{removeOp("peers", id)})
}

func (r *registry) peerList() map[string]wire.Peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.peers)
}

func peerEqual(a, b wire.Peer) bool {
	return a.NodeIP == b.NodeIP && a.LinkIP == b.LinkIP && slices.Equal(a.Addrs, b.Addrs) &&
		a.ControlPort == b.ControlPort && a.HTTPPort == b.HTTPPort && a.Alive == b.Alive && a.Stale == b.Stale
}
