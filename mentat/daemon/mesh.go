package daemon

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Mesh limits.
const (
	maxPeers = 256
	// forgetAfter: a learned (not seeded) peer nobody has reached or
	// reported for this many poll intervals is forgotten.
	forgetAfter = 12
	// meshFanout bounds concurrent /status polls in one round.
	meshFanout = 16
)

// mesh polls the seeded peers' /status, learns their peers transitively,
// and keeps the registry's peers map: keyed by node_id, link_ip being the
// address this daemon reached the peer on.
type mesh struct {
	d       *Daemon
	client  *http.Client
	targets []*target
}

// target is one daemon to poll. Only the mesh goroutine touches it, except
// during a round, when each target is polled by exactly one goroutine.
type target struct {
	seed      bool
	cands     []string // host:port to try, best first
	working   string   // the candidate that last answered
	nodeID    string   // learned from its /status
	self      bool     // the address is this daemon itself
	lastOK    time.Time
	reported  time.Time // last time a live peer listed it
	lastSnap  *wire.Snapshot
	lastError error
}

func newMesh(d *Daemon) *mesh {
	timeout := min(max(d.cfg.PeerPoll, 500*time.Millisecond), 3*time.Second)
	m := &mesh{d: d, client: &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: 2 * d.cfg.PeerPoll,
		DialContext: (&net.Dialer{Timeout: timeout}).DialContext,
	}}}
	for _, p := range d.cfg.Peers {
		m.targets = append(m.targets, &target{seed: true, cands: []string{p}})
	}
	return m
}

func (m *mesh) run(ctx context.Context) {
	defer m.client.CloseIdleConnections()
	if len(m.targets) == 0 {
		return
	}
	t := time.NewTicker(m.d.cfg.PeerPoll)
	defer t.Stop()
	for {
		m.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round polls every target once, concurrently, then folds the results in.
func (m *mesh) round(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, meshFanout)
	for _, t := range m.targets {
		if t.self {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m.poll(ctx, t)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	nodeID, _, _, _ := m.d.reg.node()
	for _, t := range m.targets {
		switch {
		case t.self:
		case t.lastSnap != nil:
			if t.lastSnap.NodeID == nodeID {
				m.d.log.Warn("peer_same_node_id", "peer", t.working, "node_id", nodeID,
					"hint", "two daemons claim one node_ip; set MENTAT_NODE_IP on one of them")
				t.self = true
				continue
			}
			if t.nodeID != "" && t.nodeID != t.lastSnap.NodeID {
				m.d.reg.removePeer(t.nodeID)
			}
			t.nodeID = t.lastSnap.NodeID
			host, port := splitHostPort(t.working)
			m.d.reg.setPeer(t.nodeID, wire.Peer{NodeIP: t.lastSnap.NodeIP, LinkIP: host,
				Addrs: nonNil(t.lastSnap.Addrs), HTTPPort: port, Alive: true})
		case t.nodeID != "":
			stale := now.Sub(t.lastOK) > 3*m.d.cfg.PeerPoll
			if old, ok := m.d.reg.peerList()[t.nodeID]; ok {
				old.Alive, old.Stale = false, stale
				m.d.reg.setPeer(t.nodeID, old)
			}
		}
	}
	m.learn(now, nodeID)
}

// learn adds the peers that live peers report, and forgets learned peers
// nobody has reached or reported for a long time.
func (m *mesh) learn(now time.Time, self string) {
	known := map[string]*target{}
	for _, t := range m.targets {
		if t.nodeID != "" {
			known[t.nodeID] = t
		}
	}
	for _, t := range m.targets {
		if t.lastSnap == nil || t.self {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(t.lastSnap.Peers)) {
			p := t.lastSnap.Peers[id]
			if id == self {
				continue
			}
			if k, ok := known[id]; ok {
				k.reported = now
				continue
			}
			if len(m.targets) >= maxPeers {
				m.d.logOnce("mesh_full", "mesh_peer_limit", "limit", maxPeers)
				continue
			}
			nt := &target{nodeID: id, cands: peerCandidates(p), reported: now}
			if len(nt.cands) == 0 {
				continue
			}
			m.targets = append(m.targets, nt)
			known[id] = nt
		}
	}
	limit := time.Duration(forgetAfter) * m.d.cfg.PeerPoll
	m.targets = slices.DeleteFunc(m.targets, func(t *target) bool {
		if t.seed || now.Sub(t.lastOK) < limit || now.Sub(t.reported) < limit {
			return false
		}
		m.d.reg.removePeer(t.nodeID)
		return true
	})
	for _, t := range m.targets {
		t.lastSnap = nil
	}
}

// poll tries the target's candidates, the last working one first, and keeps
// the first that answers.
func (m *mesh) poll(ctx context.Context, t *target) {
	order := t.cands
	if t.working != "" {
		order = append([]string{t.working}, slices.DeleteFunc(slices.Clone(t.cands), func(c string) bool { return c == t.working })...)
	}
	for _, c := range order {
		snap, err := m.fetch(ctx, c)
		if err != nil {
			t.lastError = err
			continue
		}
		if snap.BootID != "" && snap.BootID == m.d.bootID {
			t.self = true
			return
		}
		t.working, t.lastSnap, t.lastOK, t.lastError = c, snap, time.Now(), nil
		return
	}
}

func (m *mesh) fetch(ctx context.Context, hostport string) (*wire.Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostport+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /status: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, wire.MaxSnapshotBytes+1))
	if err != nil {
		return nil, err
	}
	return wire.DecodeSnapshot(body)
}

// peerCandidates lists where a reported peer may answer: the address its
// reporter reached it on, its node_ip, then its own ranking.
func peerCandidates(p wire.Peer) []string {
	port := p.HTTPPort
	if port == 0 {
		port = 6380
	}
	var out []string
	for _, h := range append([]string{p.LinkIP, p.NodeIP}, p.Addrs...) {
		if h == "" {
			continue
		}
		hp := net.JoinHostPort(h, strconv.Itoa(port))
		if !slices.Contains(out, hp) {
			out = append(out, hp)
		}
	}
	return out
}

func splitHostPort(hp string) (string, int) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
