package keys

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/series"
)

// Options configure a Store. Zero fields take the defaults noted.
type Options struct {
	// Product is the front door the store serves (Router or Gateway).
	Product Product
	// Poll is how often Run looks at the file for a change (size, mtime,
	// inode, then content); default 1 s.
	Poll time.Duration
	// Log receives keys_loaded, keys_reload_failed, keys_file_permissions
	// (a file readable by group or others) and the like; nil discards.
	Log *slog.Logger
	// Registerer gets the per-key metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Operator is an extra secret with every model in scope and no limits
	// (the gateway's MORTRED_API_TOKEN), shown as OperatorID; "" is none.
	// It is not subject to the Product's prefix.
	Operator string
	// BadKeyBurst and BadKeyRate bound failed authentications per client
	// address (before a presented key is hashed): a burst of BadKeyBurst
	// (default 20), refilled at BadKeyRate per second (default 1).
	BadKeyBurst int
	BadKeyRate  float64
	// Now is the clock; nil is time.Now. Tests set it.
	Now func() time.Time
}

// OperatorID is the id shown for Options.Operator.
const OperatorID = "operator"

// MaxSecret is the longest Authorization token looked at; longer ones are
// refused without hashing.
const MaxSecret = 256

// Sampling of the usage series: every 10 s, 15 minutes kept.
const (
	sampleInterval = 10 * time.Second
	sampleCap      = 90
)

// keySet is one loaded file: immutable once published.
type keySet struct {
	keys     []*Key
	byHash   map[[32]byte]*Key
	operator *Key
}

// fileSig is what Run compares to notice a change cheaply.
type fileSig struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// Store is a loaded key file. Safe for concurrent use; request paths never
// block on a reload.
type Store struct {
	path string
	o    Options
	log  *slog.Logger
	now  func() time.Time
	cur  atomic.Pointer[keySet]
	bad  *badTable
	// hashes counts secrets hashed (tests: refusals before the hash).
	hashes atomic.Uint64

	mu      sync.Mutex // reloads; guards states, order, sig, sum
	states  map[string]*state
	order   []string // ids in the order first seen
	sig     fileSig
	sum     [32]byte
	opBytes []byte

	reloadFailures atomic.Uint64
	authFailures   [5]atomic.Uint64 // by authReasons index

	win  *series.Window[seriesKey]
	prev map[string][3]float64 // totals at the last sample
	last time.Time
}

var authReasons = [5]Reason{MissingKey, InvalidKey, DisabledKey, ExpiredKey, BadKeyRate}

// Open reads and checks the key file at path. A file that cannot be read
// or parsed is an error naming file, line and reason (the process should
// stop). A file readable by group or others logs keys_file_permissions.
func Open(path string, o Options) (*Store, error) {
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.BadKeyBurst <= 0 {
		o.BadKeyBurst = 20
	}
	if o.BadKeyRate <= 0 {
		o.BadKeyRate = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{path: path, o: o, log: log, now: o.Now, states: map[string]*state{},
		bad: newBadTable(float64(o.BadKeyBurst), o.BadKeyRate), win: series.NewWindow[seriesKey](sampleCap), prev: map[string][3]float64{}}
	if o.Operator != "" {
		s.opBytes = []byte(o.Operator)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("keys_file_permissions", "file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()),
			"advice", "the file holds key hashes; make it readable by this process only: chmod 600 "+path)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(&collector{s: s}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Path is the key file's path.
func (s *Store) Path() string { return s.path }

// Reload reads the file now (SIGHUP calls it). On failure the keys in force
// stay, keys_reload_failed is logged with the reason and
// <metrics>_keys_reload_failures_total counts it. A key's limiter state,
// in-flight count and usage carry over a reload when its id stays.
func (s *Store) Reload() error {
	err := s.load()
	if err != nil {
		s.reloadFailures.Add(1)
		s.log.Error("keys_reload_failed", "file", s.path, "err", err.Error(), "kept", len(s.cur.Load().keys))
	}
	return err
}

// load reads, parses and publishes the file.
func (s *Store) load() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fi, err := os.Stat(s.path)
	if err != nil {
		return &FileError{File: s.path, Reason: "cannot read the key file: " + err.Error()}
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return &FileError{File: s.path, Reason: "cannot read the key file: " + err.Error()}
	}
	entries, err := Parse(s.path, data, s.o.Product)
	if err != nil {
		return err
	}
	now := s.now()
	set := &keySet{byHash: make(map[[32]byte]*Key, len(entries))}
	for _, e := range entries {
		k := s.build(e, now)
		set.keys = append(set.keys, k)
		set.byHash[k.hash] = k
	}
	if s.opBytes != nil {
		set.operator = &Key{ID: OperatorID, Weight: 1, product: s.o.Product, st: s.stateLocked(OperatorID), now: s.now}
		set.operator.hdr = newHeaderText(set.operator)
	}
	s.cur.Store(set)
	s.sig, s.sum = sigOf(fi), sha256.Sum256(data)
	if len(entries) == 0 {
		s.log.Warn("keys_file_empty", "file", s.path, "effect", "no key admits anything: every request needs a key and gets 401")
	}
	s.log.Info("keys_loaded", "file", s.path, "keys", len(entries))
	return nil
}

func (s *Store) build(e Entry, now time.Time) *Key {
	prio, _ := ParsePriority(e.Priority) // Parse checked it
	k := &Key{ID: e.ID, Models: e.Models, Priority: prio, Weight: e.Weight, RPM: e.RPM, MaxConcurrent: e.MaxConcurrent,
		product: s.o.Product, disabled: e.Disabled, now: s.now}
	if k.Weight == 0 {
		k.Weight = 1
	}
	k.Units = e.TPM
	if s.o.Product.Unit == Images {
		k.Units = e.IPM
	}
	if e.Expires != nil {
		k.Expires = *e.Expires
	}
	for _, g := range e.Models {
		k.globs = append(k.globs, strings.ReplaceAll(g, "/", "\x00"))
	}
	k.hdr = newHeaderText(k)
	h, _ := hex.DecodeString(e.Hash)
	copy(k.hash[:], h)
	k.st = s.stateLocked(e.ID)
	k.st.mu.Lock()
	k.st.req.setLimit(k.RPM, now)
	k.st.units.setLimit(k.Units, now)
	k.st.mu.Unlock()
	return k
}

func (s *Store) stateLocked(id string) *state {
	st := s.states[id]
	if st == nil {
		st = newState(id)
		s.states[id] = st
		s.order = append(s.order, id)
	}
	return st
}

func sigOf(fi os.FileInfo) fileSig {
	sg := fileSig{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		sg.ino = st.Ino
	}
	return sg
}

// changed reports whether the file differs from the one in force: first
// by its size, mtime and inode, then, when those moved, by its content.
func (s *Store) changed() bool {
	fi, err := os.Stat(s.path)
	if err != nil {
		return false // a file being replaced; the next look sees it
	}
	s.mu.Lock()
	sig, sum := s.sig, s.sum
	s.mu.Unlock()
	if sigOf(fi) == sig {
		return false
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return false
	}
	if sha256.Sum256(data) == sum {
		s.mu.Lock()
		s.sig = sigOf(fi)
		s.mu.Unlock()
		return false
	}
	return true
}

// Run watches the file (every Options.Poll) and reloads it on change, and
// samples the usage series (every 10 s, 90 samples: 15 minutes), until ctx
// ends.
func (s *Store) Run(ctx context.Context) {
	poll := time.NewTicker(s.o.Poll)
	defer poll.Stop()
	sample := time.NewTicker(sampleInterval)
	defer sample.Stop()
	s.sample(s.now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			if s.changed() {
				_ = s.Reload() // logged and counted there
			}
		case <-sample.C:
			s.sample(s.now())
		}
	}
}

// Keys lists the keys in force, in file order.
func (s *Store) Keys() []*Key {
	set := s.cur.Load()
	return append([]*Key(nil), set.keys...)
}

// Authenticate checks a request's Authorization header (Bearer scheme, any
// case, one header) for client address addr (an IP, no port). A client
// address over its failed-authentication budget is refused with 429
// (reason bad_key_rate) before the key is hashed. A missing header is 401
// missing_key; an unknown key 401 invalid_key; a disabled or expired key
// 401 disabled or expired. Only the id ever reaches a log or metric.
func (s *Store) Authenticate(header http.Header, addr string) (*Key, *Rejection) {
	vv := header["Authorization"]
	if len(vv) == 0 {
		return nil, s.authFail(MissingKey, "", "this endpoint needs an API key: send Authorization: Bearer <key>")
	}
	now := s.now()
	slot := s.bad.slot(addr)
	if wait := slot.wait(now); wait > 0 {
		return nil, s.authFail(BadKeyRate, "", fmt.Sprintf("too many requests with a wrong API key from this address; retry after %s with a valid key", ceilMS(wait)), wait)
	}
	token, ok := bearer(vv)
	if !ok {
		slot.take(now)
		return nil, s.authFail(InvalidKey, "", "the Authorization header is not one `Bearer <key>`; send exactly one, with the key the operator gave you")
	}
	set := s.cur.Load()
	if set.operator != nil && subtle.ConstantTimeCompare([]byte(token), s.opBytes) == 1 {
		return set.operator, nil
	}
	if !strings.HasPrefix(token, s.o.Product.Prefix) {
		slot.take(now)
		return nil, s.authFail(InvalidKey, "", "invalid API key; keys of this server start with "+s.o.Product.Prefix)
	}
	s.hashes.Add(1)
	// On the stack: a plain []byte(token) of a key's length (over 32
	// bytes) would be a heap allocation per request.
	var buf [MaxSecret]byte
	sum := sha256.Sum256(append(buf[:0], token...))
	k := set.byHash[sum]
	if k == nil || subtle.ConstantTimeCompare(k.hash[:], sum[:]) != 1 {
		slot.take(now)
		return nil, s.authFail(InvalidKey, "", "invalid API key; check the key you were given, or ask the operator for a new one")
	}
	switch {
	case k.disabled:
		slot.take(now)
		return nil, s.authFail(DisabledKey, k.ID, fmt.Sprintf("API key %s is disabled; ask the operator to enable it or for a new one", k.ID))
	case !k.Expires.IsZero() && !now.Before(k.Expires):
		slot.take(now)
		return nil, s.authFail(ExpiredKey, k.ID, fmt.Sprintf("API key %s expired at %s; ask the operator for a new one", k.ID, k.Expires.UTC().Format(time.RFC3339)))
	}
	return k, nil
}

// bearer is the one token of a single `Bearer <token>` value.
func bearer(vv []string) (string, bool) {
	if len(vv) != 1 {
		return "", false
	}
	v := vv[0]
	const scheme = "bearer "
	if len(v) <= len(scheme) || len(v) > len(scheme)+MaxSecret || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	t := strings.TrimLeft(v[len(scheme):], " ")
	t = strings.TrimRight(t, " \t")
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", false
	}
	return t, true
}

func (s *Store) authFail(r Reason, id, msg string, wait ...time.Duration) *Rejection {
	for i, ar := range authReasons {
		if ar == r {
			s.authFailures[i].Add(1)
		}
	}
	rej := &Rejection{Status: http.StatusUnauthorized, Reason: r, Message: msg, realm: s.o.Product.Name}
	if r == BadKeyRate {
		rej.Status, rej.RetryAfter = http.StatusTooManyRequests, wait[0]
	}
	if id != "" {
		s.log.Debug("keys_refused", "key", id, "reason", string(r))
	}
	return rej
}

// badTable bounds failed authentications per client address in a fixed
// number of buckets (addresses that hash alike share one), so an attacker
// cycling addresses costs memory never.
type badTable struct {
	seed        maphash.Seed
	burst, rate float64
	slots       [4096]badSlot
}

type badSlot struct {
	t    *badTable
	mu   sync.Mutex
	used float64 // failures not yet refilled
	last time.Time
}

func newBadTable(burst, rate float64) *badTable {
	t := &badTable{seed: maphash.MakeSeed(), burst: burst, rate: rate}
	for i := range t.slots {
		t.slots[i].t = t
	}
	return t
}

func (t *badTable) slot(addr string) *badSlot {
	return &t.slots[maphash.String(t.seed, addr)%uint64(len(t.slots))]
}

func (b *badSlot) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.used = math.Max(0, b.used-dt*b.t.rate)
	}
	b.last = now
}

// wait is 0 while the address may try a key, else how long until it may.
func (b *badSlot) wait(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if over := b.used + 1 - b.t.burst; over > 0 {
		return time.Duration(over / b.t.rate * float64(time.Second))
	}
	return 0
}

func (b *badSlot) take(now time.Time) {
	b.mu.Lock()
	b.refill(now)
	b.used++
	b.mu.Unlock()
}
