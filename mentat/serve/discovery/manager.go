// Package discovery builds the router's watch set of mentat daemons and
// follows each one. Addresses come from three sources: the MENTAT_DAEMONS
// seed list, UDP announcements, and the mesh peers every watched daemon
// reports. Each watched daemon gets one watcher (poll /status, /events as a
// doorbell). Watchers write their views into a keyed map and poke a
// capacity-one trigger; the consumer re-reads Views whenever Changed fires,
// so any burst of updates costs it one rebuild.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// Sources of a watched address.
const (
	SourceSeed     = "seed"
	SourceAnnounce = "announce"
	SourcePeer     = "peer"
)

// Config configures a Manager. Durations must be positive unless noted.
type Config struct {
	// Seeds are daemon HTTP addresses (host:port) from MENTAT_DAEMONS.
	Seeds []string
	// AnnounceAddr is the UDP address to listen on for announcements
	// (":6382"); empty turns the listener off.
	AnnounceAddr string
	Allow        Allow
	// DiscoverPeers adds every watched daemon's alive mesh peers.
	DiscoverPeers bool
	// PollInterval is POLL_INTERVAL_S; a view older than three of them is
	// stale.
	PollInterval time.Duration
	// FetchTimeout bounds one /status read and one /events handshake.
	FetchTimeout time.Duration
	// Key is the announcement HMAC key; empty accepts unsigned datagrams.
	Key      []byte
	Universe string
	// Subnets returns the router's own subnets; nil is LocalSubnets.
	Subnets SubnetsFunc
	// MaxAnnounced and MaxPeers bound the watch set (defaults 256 each).
	MaxAnnounced, MaxPeers int
	// ForgetAfter drops an announced or peer address that has neither been
	// hinted at nor answered for this long (default max(6 polls, 2 min)).
	ForgetAfter time.Duration
	Logger      *slog.Logger
}

// View is the router's knowledge of one watched daemon. The Snapshot it
// carries is shared and must not be modified.
type View struct {
	Addr   string
	Seed   bool
	Source string // the first source that added the address
	// Snapshot is the last good /status (nil until one arrives) and Fetched
	// when it was read.
	Snapshot *wire.Snapshot
	Fetched  time.Time
	// Err is the last poll's error, empty when the last poll succeeded.
	Err string
	// Events reports whether the /events WebSocket is open.
	Events bool
	// Previous is the last snapshot of the daemon's previous process when
	// Snapshot comes from a new one (another boot_id), kept until
	// PreviousUntil. A restarted daemon starts with an empty registry and
	// fills it as its agents notice the new boot and register again; its
	// groups must not read as gone in between (see Carried).
	Previous      *wire.Snapshot
	PreviousUntil time.Time
}

// Carried returns the previous boot's snapshot while it still counts: for
// three poll intervals after the restart was seen, as long as an
// unreachable daemon's last view would count. Groups it holds that the
// new process does not report yet keep routing in that window.
func (v *View) Carried(now time.Time) *wire.Snapshot {
	if v.Previous == nil || now.After(v.PreviousUntil) {
		return nil
	}
	return v.Previous
}

// Fresh reports whether the view is younger than three poll intervals.
func (v *View) Fresh(now time.Time, poll time.Duration) bool {
	return v.Snapshot != nil && now.Sub(v.Fetched) <= 3*poll
}

type target struct {
	view         View
	nodeID       string // announced node id, for replacing a moved address
	lastAnnounce time.Time
	lastPeer     time.Time
	cancel       context.CancelFunc
	done         chan struct{}
}

// Manager owns the watch set. Create with New, optionally Listen, then Run.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	recv   *Receiver
	getter *Getter

	udp *net.UDPConn

	trigger chan struct{}

	mu      sync.Mutex
	runCtx  context.Context
	wg      sync.WaitGroup
	targets map[string]*target
	full    logx.Once
}

// New validates cfg and builds a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.PollInterval <= 0 || cfg.FetchTimeout <= 0 {
		return nil, errors.New("discovery: PollInterval and FetchTimeout must be positive")
	}
	if cfg.MaxAnnounced <= 0 {
		cfg.MaxAnnounced = 256
	}
	if cfg.MaxPeers <= 0 {
		cfg.MaxPeers = 256
	}
	if cfg.ForgetAfter <= 0 {
		cfg.ForgetAfter = max(6*cfg.PollInterval, 2*time.Minute)
	}
	if cfg.Subnets == nil {
		cfg.Subnets = LocalSubnets
	}
	if cfg.Logger == nil {
		cfg.Logger = logx.Discard()
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger,
		recv: NewReceiver(ReceiverConfig{Universe: cfg.Universe, Key: cfg.Key, Allow: cfg.Allow,
			Subnets: cfg.Subnets, Logger: cfg.Logger}),
		getter:  NewGetter(0),
		trigger: make(chan struct{}, 1),
		targets: map[string]*target{},
	}
	for _, s := range cfg.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("discovery: seed %q is not host:port: %v", s, err)
		}
		m.targets[s] = &target{view: View{Addr: s, Seed: true, Source: SourceSeed}}
	}
	return m, nil
}

// Receiver exposes the announcement checker (for its counters).
func (m *Manager) Receiver() *Receiver { return m.recv }

// Listen binds the announcement socket when one is configured. Run calls it
// when the caller did not.
func (m *Manager) Listen() error {
	if m.cfg.AnnounceAddr == "" || m.udp != nil {
		return nil
	}
	ua, err := net.ResolveUDPAddr("udp", m.cfg.AnnounceAddr)
	if err != nil {
		return fmt.Errorf("announce listener %s: %w", m.cfg.AnnounceAddr, err)
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("announce listener %s: %w: another router on this host probably holds the UDP port; set MENTAT_ANNOUNCE_PORT to a free port (and the daemons' MENTAT_ANNOUNCE_PORT to match), or to 0 to find daemons through MENTAT_DAEMONS only", m.cfg.AnnounceAddr, err)
		}
		return fmt.Errorf("announce listener %s: %w (set MENTAT_ANNOUNCE_PORT=0 to turn it off)", m.cfg.AnnounceAddr, err)
	}
	m.udp = c
	return nil
}

// AnnounceAddr is the bound announcement address, nil when off or not yet
// listening.
func (m *Manager) AnnounceAddr() net.Addr {
	if m.udp == nil {
		return nil
	}
	return m.udp.LocalAddr()
}

// Changed fires (capacity one) after anything in the watch set changed.
func (m *Manager) Changed() <-chan struct{} { return m.trigger }

func (m *Manager) poke() {
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// Views returns a copy of every watched daemon's view, sorted by address.
func (m *Manager) Views() []View {
	m.mu.Lock()
	out := make([]View, 0, len(m.targets))
	for _, t := range m.targets {
		out = append(out, t.view)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// Run watches until ctx ends, then stops every watcher and returns once
// they have all returned.
func (m *Manager) Run(ctx context.Context) error {
	if err := m.Listen(); err != nil {
		return err
	}
	defer m.getter.Close()
	m.mu.Lock()
	m.runCtx = ctx
	for _, t := range m.targets {
		m.startLocked(t)
	}
	m.mu.Unlock()
	if m.udp != nil {
		m.wg.Go(func() { m.readUDP(ctx) })
		context.AfterFunc(ctx, func() { m.udp.Close() })
	}
	m.wg.Go(func() { m.maintain(ctx) })
	<-ctx.Done()
	m.wg.Wait()
	return nil
}

func (m *Manager) startLocked(t *target) {
	if m.runCtx == nil || t.cancel != nil || m.runCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(m.runCtx)
	t.cancel, t.done = cancel, make(chan struct{})
	w := &watcher{addr: t.view.Addr, poll: m.cfg.PollInterval, timeout: m.cfg.FetchTimeout, getter: m.getter,
		log: m.log, report: m.report, events: m.eventsState}
	done := t.done
	m.wg.Go(func() {
		defer close(done)
		w.run(ctx)
	})
}

func (m *Manager) report(addr string, snap *wire.Snapshot, err error) {
	m.mu.Lock()
	t := m.targets[addr]
	if t == nil {
		m.mu.Unlock()
		return
	}
	if err != nil {
		if t.view.Err == "" {
			m.log.Warn("daemon_unreachable", "daemon", addr, "err", err)
		}
		t.view.Err = err.Error()
	} else {
		if t.view.Err != "" || t.view.Snapshot == nil {
			m.log.Info("daemon_connected", "daemon", addr, "node_id", snap.NodeID)
		}
		now := time.Now()
		if old := t.view.Snapshot; old != nil && old.BootID != "" && snap.BootID != "" && old.BootID != snap.BootID &&
			t.view.Fresh(now, m.cfg.PollInterval) {
			m.log.Info("daemon_restarted", "daemon", addr, "boot_id", snap.BootID, "previous_boot_id", old.BootID)
			t.view.Previous, t.view.PreviousUntil = old, now.Add(3*m.cfg.PollInterval)
		}
		t.view.Snapshot, t.view.Fetched, t.view.Err = snap, now, ""
		if m.cfg.DiscoverPeers {
			m.addPeersLocked(snap, t.view.Fetched)
		}
	}
	m.mu.Unlock()
	m.poke()
}

func (m *Manager) eventsState(addr string, open bool) {
	m.mu.Lock()
	if t := m.targets[addr]; t != nil && t.view.Events != open {
		t.view.Events = open
		defer m.poke()
	}
	m.mu.Unlock()
}

// knownNodesLocked indexes every node identity a fresh view vouches for
// with the address it is watched on.
func (m *Manager) knownNodesLocked(now time.Time) map[string]bool {
	known := map[string]bool{}
	for _, t := range m.targets {
		s := t.view.Snapshot
		if s == nil || !t.view.Fresh(now, m.cfg.PollInterval) {
			continue
		}
		if s.NodeID != "" {
			known[s.NodeID] = true
		}
		if s.NodeIP != "" {
			known[s.NodeIP] = true
		}
	}
	return known
}

// addPeersLocked adds the alive peers of snap that no fresh view covers.
func (m *Manager) addPeersLocked(snap *wire.Snapshot, now time.Time) {
	known := m.knownNodesLocked(now)
	subnets := m.cfg.Subnets()
	ids := make([]string, 0, len(snap.Peers))
	for id := range snap.Peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		p := snap.Peers[id]
		if !p.Alive || p.Stale || p.HTTPPort <= 0 || p.HTTPPort > 65535 {
			continue
		}
		addr := peerAddr(p, subnets)
		if addr == "" {
			continue
		}
		if t := m.targets[addr]; t != nil {
			t.lastPeer = now
			continue
		}
		if known[id] || (p.NodeIP != "" && known[p.NodeIP]) {
			continue
		}
		if m.countLocked(SourcePeer) >= m.cfg.MaxPeers {
			m.full.Log(m.log, slog.LevelWarn, "peers", "watch_set_full", "source", SourcePeer, "limit", m.cfg.MaxPeers, "dropped", addr)
			continue
		}
		t := &target{view: View{Addr: addr, Source: SourcePeer}, lastPeer: now}
		m.targets[addr] = t
		m.log.Info("daemon_discovered", "daemon", addr, "source", SourcePeer, "via", snap.NodeID)
		m.startLocked(t)
	}
}

// peerAddr picks where to reach a peer: its first address on one of our own
// subnets, else the link address its neighbour reaches it on, else its
// node address.
func peerAddr(p wire.Peer, subnets []*net.IPNet) string {
	host := ""
	for _, a := range p.Addrs {
		if OnLink(a, subnets) {
			host = a
			break
		}
	}
	for _, h := range []string{p.LinkIP, p.NodeIP} {
		if host == "" {
			host = h
		}
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsValid() || ip.IsUnspecified() {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(p.HTTPPort))
}

func (m *Manager) countLocked(source string) int {
	n := 0
	for _, t := range m.targets {
		if !t.view.Seed && t.view.Source == source {
			n++
		}
	}
	return n
}

// addAnnounced records an accepted announcement.
func (m *Manager) addAnnounced(a Accepted) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.targets[a.Addr]; t != nil {
		t.lastAnnounce, t.nodeID = now, a.NodeID
		return
	}
	// A node that moved: forget its old announced-only address.
	for addr, t := range m.targets {
		if t.nodeID == a.NodeID && !t.view.Seed && t.view.Source == SourceAnnounce {
			m.removeLocked(addr)
		}
	}
	if m.countLocked(SourceAnnounce) >= m.cfg.MaxAnnounced {
		m.full.Log(m.log, slog.LevelWarn, "announced", "watch_set_full", "source", SourceAnnounce, "limit", m.cfg.MaxAnnounced, "dropped", a.Addr)
		return
	}
	t := &target{view: View{Addr: a.Addr, Source: SourceAnnounce}, nodeID: a.NodeID, lastAnnounce: now}
	m.targets[a.Addr] = t
	m.log.Info("daemon_discovered", "daemon", a.Addr, "source", SourceAnnounce, "node_id", a.NodeID)
	m.startLocked(t)
	defer m.poke()
}

func (m *Manager) removeLocked(addr string) {
	t := m.targets[addr]
	if t == nil {
		return
	}
	delete(m.targets, addr)
	if t.cancel != nil {
		t.cancel() // the watcher drains on its own; Run waits for it
	}
	m.log.Info("daemon_forgotten", "daemon", addr, "source", t.view.Source)
}

// maintain forgets hinted addresses that went quiet, and peers whose node
// a non-peer view now covers.
func (m *Manager) maintain(ctx context.Context) {
	t := time.NewTicker(m.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m.prune(time.Now()) {
			m.poke()
		}
	}
}

func (m *Manager) prune(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	covered := map[string]bool{} // node ids watched through a seed or an announcement
	for _, t := range m.targets {
		if t.view.Source != SourcePeer && t.view.Fresh(now, m.cfg.PollInterval) {
			covered[t.view.Snapshot.NodeID] = true
		}
	}
	for addr, t := range m.targets {
		if t.view.Seed {
			continue
		}
		hint := t.lastAnnounce
		if t.lastPeer.After(hint) {
			hint = t.lastPeer
		}
		quiet := now.Sub(hint) > m.cfg.ForgetAfter && now.Sub(t.view.Fetched) > m.cfg.ForgetAfter
		dup := t.view.Source == SourcePeer && t.view.Snapshot != nil && covered[t.view.Snapshot.NodeID] &&
			t.view.Snapshot.NodeID != ""
		if quiet || dup {
			m.removeLocked(addr)
			changed = true
		}
	}
	return changed
}

func (m *Manager) readUDP(ctx context.Context) {
	buf := make([]byte, 2048) // over MaxDatagram, so an oversize datagram reads as oversize
	for {
		n, src, err := m.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			m.log.Warn("announce_read_failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		func() {
			defer recoverLog(m.log, "announce_panic", "source", src.Addr().String())
			if a, ok := m.recv.Accept(src.Addr(), buf[:n]); ok {
				m.addAnnounced(a)
			}
		}()
	}
}
