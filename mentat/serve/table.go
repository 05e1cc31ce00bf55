package serve

import (
	"sort"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/serve/discovery"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// node is one node's description: its addresses in its own ranking.
type node struct {
	ip    string
	addrs []string
}

// nodeIndex finds a node by any identity it has: its node_ip, each of its
// addrs, and for peers the link_ip.
type nodeIndex map[string]*node

func (ix nodeIndex) add(n *node, keys ...string) {
	for _, k := range keys {
		if k == "" {
			continue
		}
		// The fuller description wins; on a tie the first seen stays, and
		// views are visited in address order, so the choice is stable.
		if old := ix[k]; old == nil || len(n.addrs) > len(old.addrs) {
			ix[k] = n
		}
	}
}

// addrsOf returns the addresses of the node an agent reports for,
// falling back to the agent's own node_ip when no view describes it.
func (ix nodeIndex) addrsOf(nodeIP string) []string {
	if n := ix[nodeIP]; n != nil && len(n.addrs) > 0 {
		return n.addrs
	}
	if n := ix[nodeIP]; n != nil && n.ip != "" {
		return []string{n.ip}
	}
	if nodeIP == "" {
		return nil
	}
	return []string{nodeIP}
}

func indexNodes(views []discovery.View) nodeIndex {
	ix := nodeIndex{}
	for _, v := range views {
		s := v.Snapshot
		n := &node{ip: s.NodeIP, addrs: s.Addrs}
		ix.add(n, append([]string{s.NodeIP}, s.Addrs...)...)
		ids := make([]string, 0, len(s.Peers))
		for id := range s.Peers {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			p := s.Peers[id]
			pn := &node{ip: p.NodeIP, addrs: p.Addrs}
			ix.add(pn, append([]string{p.NodeIP, p.LinkIP}, p.Addrs...)...)
		}
	}
	return ix
}

// endpoint is one announced service with the addresses of the node that
// announced it.
type endpoint struct {
	agent     string
	svc       wire.Service
	nodeIP    string
	nodeAddrs []string
}

// groupEntry is one group after merging every fresh daemon view.
type groupEntry struct {
	name          string
	daemon        string
	agentsAlive   int
	actorsRunning int
	openai        *endpoint // nil when no agent announces one
	mcp           *endpoint
}

// buildTable merges the fresh views into one entry per group name. When
// two daemons disagree about a group, the one reporting more running
// actors wins; ties go to more alive agents, then to the lower daemon
// address.
func buildTable(views []discovery.View, now time.Time, poll time.Duration) map[string]*groupEntry {
	var fresh []discovery.View
	for _, v := range views {
		if v.Fresh(now, poll) {
			fresh = append(fresh, v)
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Addr < fresh[j].Addr })
	ix := indexNodes(fresh)

	type pick struct {
		view    *discovery.View
		g       wire.Group
		running int
		alive   int
	}
	best := map[string]pick{}
	consider := func(v *discovery.View, name string, g wire.Group) {
		p := pick{view: v, g: g, running: countRunning(g), alive: countAlive(g)}
		old, seen := best[name]
		if !seen || p.running > old.running || (p.running == old.running && p.alive > old.alive) {
			best[name] = p
		}
	}
	for i := range fresh {
		v := &fresh[i]
		for name, g := range v.Snapshot.Groups {
			consider(v, name, g)
		}
		// A restarted daemon's groups that have not registered again yet.
		if prev := v.Carried(now); prev != nil {
			for name, g := range prev.Groups {
				if _, ok := v.Snapshot.Groups[name]; !ok {
					consider(v, name, g)
				}
			}
		}
	}
	out := make(map[string]*groupEntry, len(best))
	for name, p := range best {
		e := &groupEntry{name: name, daemon: p.view.Addr, agentsAlive: p.alive, actorsRunning: p.running}
		e.openai = announcing(p.g, wire.ServiceOpenAI, ix, "")
		prefer := ""
		if e.openai != nil {
			prefer = e.openai.agent
		}
		e.mcp = announcing(p.g, wire.ServiceMCP, ix, prefer)
		out[name] = e
	}
	return out
}

func countRunning(g wire.Group) int {
	n := 0
	for _, a := range g.Actors {
		if a.State == wire.ActorRunning {
			n++
		}
	}
	return n
}

func countAlive(g wire.Group) int {
	n := 0
	for _, a := range g.Agents {
		if a.Alive {
			n++
		}
	}
	return n
}

// announcing picks the agent whose service to use: prefer (the agent
// serving the API, so the MCP lives beside it) when it announces the
// service, else the lexically first alive agent, else the lexically first
// at all (its probe then says what is wrong).
func announcing(g wire.Group, service string, ix nodeIndex, prefer string) *endpoint {
	ids := make([]string, 0, len(g.Agents))
	for id, a := range g.Agents {
		if _, ok := a.Services[service]; ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	sort.Strings(ids)
	chosen := ""
	if _, ok := g.Agents[prefer].Services[service]; ok && prefer != "" {
		chosen = prefer
	}
	for _, id := range ids {
		if chosen == "" && g.Agents[id].Alive {
			chosen = id
		}
	}
	if chosen == "" {
		chosen = ids[0]
	}
	a := g.Agents[chosen]
	return &endpoint{agent: chosen, svc: a.Services[service], nodeIP: a.NodeIP, nodeAddrs: ix.addrsOf(a.NodeIP)}
}
