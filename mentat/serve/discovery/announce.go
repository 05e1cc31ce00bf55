package discovery

import (
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/internal/logx"
	"github.com/fe64bb06/frontdoor/mentat/wire"
)

// MaxSkew is how far a signed announcement's t may be from our clock.
const MaxSkew = 30 * time.Second

// Drop reasons, in the receiver's order, for the per-reason counters.
const (
	DropSize = iota
	DropDecode
	DropUniverse
	DropSignature
	DropSkew
	DropReplay
	DropPort
	DropSource
	numDrops
)

var dropNames = [numDrops]string{"size", "decode", "universe", "signature", "skew", "replay", "port", "source"}

// Bounds on what a flood of announcements can make the receiver remember.
const (
	maxReplayKeys   = 4096
	maxRejectedLogs = 1024
	replayTTL       = 10 * time.Minute
)

// Accepted is what an announcement that passed every check adds: one daemon
// HTTP address to watch.
type Accepted struct {
	NodeID string
	// Addr is host:port of the daemon's HTTP interface.
	Addr string
}

// Receiver checks announcements in the protocol's order (mentat-wire.md,
// "Receiver order"). Accept is safe for concurrent use.
type Receiver struct {
	universe string
	key      []byte
	allow    Allow
	subnets  SubnetsFunc
	now      func() time.Time
	log      *slog.Logger

	mu       sync.Mutex
	replay   map[[2]string]replayEntry
	rejected map[string]struct{} // sources already logged as announce_rejected

	notAllowed logx.Once
	drops      [numDrops]atomic.Uint64
	accepted   atomic.Uint64
}

type replayEntry struct {
	seq  int64
	seen time.Time
}

// ReceiverConfig configures a Receiver. Zero Universe is "default"; nil
// Subnets is LocalSubnets; nil Now is time.Now; nil Logger discards.
type ReceiverConfig struct {
	Universe string
	Key      []byte
	Allow    Allow
	Subnets  SubnetsFunc
	Now      func() time.Time
	Logger   *slog.Logger
}

// NewReceiver builds a Receiver.
func NewReceiver(c ReceiverConfig) *Receiver {
	r := &Receiver{universe: c.Universe, key: c.Key, allow: c.Allow, subnets: c.Subnets, now: c.Now, log: c.Logger,
		replay: map[[2]string]replayEntry{}, rejected: map[string]struct{}{}}
	if r.universe == "" {
		r.universe = wire.DefaultUniverse
	}
	if r.subnets == nil {
		r.subnets = LocalSubnets
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = logx.Discard()
	}
	return r
}

// Accept checks one datagram received from src. It returns the daemon
// address to watch and true when the announcement passes every step.
func (r *Receiver) Accept(src netip.Addr, b []byte) (Accepted, bool) {
	src = src.Unmap()
	// 1. size, before any parsing.
	if len(b) > wire.MaxDatagram {
		return r.drop(DropSize)
	}
	d, err := wire.DecodeDatagram(b)
	if err != nil {
		return r.drop(DropDecode)
	}
	p := &d.Payload
	// 2. universe, silently and before any signature work.
	if d.UniverseOrDefault() != r.universe {
		return r.drop(DropUniverse)
	}
	// 3. signature, when we hold a key.
	if len(r.key) > 0 && !d.VerifySig(r.key) {
		r.logRejected(src, d.Signed())
		return r.drop(DropSignature)
	}
	// 4. freshness of signed datagrams.
	if d.Signed() {
		skew := r.now().Sub(time.Unix(p.T, 0))
		if skew > MaxSkew || skew < -MaxSkew {
			return r.drop(DropSkew)
		}
	}
	// 5. replay: checked here, recorded only once everything passed.
	key := [2]string{p.NodeID, p.BootID}
	r.mu.Lock()
	last, seen := r.replay[key]
	r.mu.Unlock()
	if seen && p.Seq <= last.seq {
		return r.drop(DropReplay)
	}
	// 6. http port.
	host, portStr, err := net.SplitHostPort(p.HTTP)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil || port <= 0 || port > 65535 {
		return r.drop(DropPort)
	}
	// 7. sources: the datagram's and every address it advertises.
	if bad, ok := r.disallowed(src, host, p.Addrs); !ok {
		r.notAllowed.Log(r.log, slog.LevelWarn, "announce_source_not_allowed", "announce_source_not_allowed",
			"source", src.String(), "address", bad, "node_id", p.NodeID, "allowed", r.allow.String())
		return r.drop(DropSource)
	}

	watch := src.String()
	subnets := r.subnets()
	for _, a := range p.Addrs {
		if ip, err := netip.ParseAddr(a); err == nil && OnLink(ip.String(), subnets) {
			watch = ip.String()
			break
		}
	}
	r.record(key, p.Seq)
	r.accepted.Add(1)
	return Accepted{NodeID: p.NodeID, Addr: net.JoinHostPort(watch, portStr)}, true
}

// disallowed returns the first address failing ALLOWED_SOURCES.
func (r *Receiver) disallowed(src netip.Addr, httpHost string, addrs []string) (string, bool) {
	if !r.allow.Addr(src) {
		return src.String(), false
	}
	if httpHost != "" && !r.allow.Host(httpHost) {
		return httpHost, false
	}
	for _, a := range addrs {
		if !r.allow.Host(a) {
			return a, false
		}
	}
	return "", true
}

func (r *Receiver) record(key [2]string, seq int64) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.replay[key]; !ok && len(r.replay) >= maxReplayKeys {
		// A flood of node ids: forget what is old, then the oldest.
		var oldestKey [2]string
		var oldest time.Time
		for k, e := range r.replay {
			if now.Sub(e.seen) > replayTTL {
				delete(r.replay, k)
				continue
			}
			if oldest.IsZero() || e.seen.Before(oldest) {
				oldest, oldestKey = e.seen, k
			}
		}
		if len(r.replay) >= maxReplayKeys {
			delete(r.replay, oldestKey)
		}
	}
	r.replay[key] = replayEntry{seq: seq, seen: now}
}

func (r *Receiver) logRejected(src netip.Addr, signed bool) {
	s := src.String()
	r.mu.Lock()
	_, dup := r.rejected[s]
	full := len(r.rejected) >= maxRejectedLogs
	if !dup && !full {
		r.rejected[s] = struct{}{}
	}
	r.mu.Unlock()
	if dup {
		return
	}
	if full {
		r.notAllowed.Log(r.log, slog.LevelWarn, "announce_rejected_suppressed", "announce_rejected_suppressed",
			"reason", "too many rejected sources to log each once", "limit", maxRejectedLogs)
		return
	}
	reason := "bad signature"
	if !signed {
		reason = "unsigned, and MENTAT_SECRET is set"
	}
	r.log.Warn("announce_rejected", "source", s, "reason", reason)
}

func (r *Receiver) drop(reason int) (Accepted, bool) {
	r.drops[reason].Add(1)
	return Accepted{}, false
}

// Counts reports accepted datagrams and drops per reason.
func (r *Receiver) Counts() map[string]uint64 {
	out := map[string]uint64{"accepted": r.accepted.Load()}
	for i := range r.drops {
		out[dropNames[i]] = r.drops[i].Load()
	}
	return out
}
