package balance

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/mentat/serve/routes"
)

// Balancer orders a model's replicas for each request. Create it with
// New; it is safe for concurrent use.
type Balancer struct {
	cfg Config
	now func() time.Time
	m   *metrics

	// replicas holds per-group state (*replicaState): a group is one
	// engine, whatever number of models it serves.
	replicas sync.Map
	// models holds per-model state (*modelState).
	models sync.Map
}

type replicaState struct {
	inflight atomic.Int64
	// ended counts the router's requests to the replica that ended;
	// learned is the engine's capacity as seen when it queued (0:
	// not seen queueing).
	ended   atomic.Int64
	learned atomic.Int64
	// grown is when the learned capacity was last raised (unix ns).
	grown atomic.Int64
	// grewFrom is the capacity before the last raise while that raise is
	// unjudged (0: none); growFails counts the raises in a row that the
	// engine answered by queueing, each doubling the wait before the
	// next (Observe's alone).
	grewFrom  int64
	growFails int
	// queuedAt is the running counts of the last scrapes that found the
	// engine queueing (Observe's alone: one goroutine per group).
	queuedAt [learnWindow]int64
	queuedN  int
	// refused is when the replica last refused a connection (unix
	// nanoseconds), 0 when it has not since its last good probe.
	refused atomic.Int64
	load    atomic.Pointer[EngineLoad]
}

type modelState struct {
	ix *index
	rr atomic.Uint64
	// starting serializes ChooseAndStart with flow control on.
	starting sync.Mutex
}

// EngineLoad is what one engine's /metrics said.
type EngineLoad struct {
	// Running and Waiting are the engine's requests being generated and
	// queued; KV its KV-cache usage, 0–1 (HasKV false when unpublished).
	Running, Waiting, KV float64
	HasKV                bool
	// At is when the scrape ended; OK is false when it failed or had no
	// request counts (the replica counts as busy, as when At is old).
	At time.Time
	OK bool
	// Own is how many requests the router had in flight to the engine
	// when the scrape ended (Watch sets it): the part of Running+Waiting
	// that is the router's own, already counted live. Ended is how many
	// of the router's requests to it had ended by then.
	Own   float64
	Ended int64
}

// New returns a Balancer. Its metrics are registered on reg (nil: not
// registered).
func New(cfg Config, reg prometheus.Registerer) *Balancer {
	return &Balancer{cfg: cfg.withDefaults(), now: time.Now, m: newMetrics(reg)}
}

// Config is the configuration in use, defaults filled in.
func (b *Balancer) Config() Config { return b.cfg }

func (b *Balancer) replica(group string) *replicaState {
	if v, ok := b.replicas.Load(group); ok {
		return v.(*replicaState)
	}
	v, _ := b.replicas.LoadOrStore(group, &replicaState{})
	return v.(*replicaState)
}

func (b *Balancer) model(name string) *modelState {
	if v, ok := b.models.Load(name); ok {
		return v.(*modelState)
	}
	v, _ := b.models.LoadOrStore(name, &modelState{ix: newIndex(b.cfg.IndexBlocks)})
	return v.(*modelState)
}

// Request is what the policies read from one request.
type Request struct {
	Model string
	// Keys are the prompt's block keys (Blocks.Keys); nil when the body
	// has no prompt.
	Keys []uint64
	// Session is the session key ("" when the request has none).
	Session string
}

// Decision is a replica order for one request.
type Decision struct {
	// Order lists every replica, the one to try first first; the proxy
	// moves to the next only when one refuses the connection.
	Order []*routes.Route
	// Reason is why Order[0] was chosen.
	Reason Reason
	// Matched is how many prompt blocks Order[0] holds (prefix policy).
	Matched int
}

// rank orders replicas before load: ready ones first, then those whose
// engine numbers are stale, then those that refused a connection since
// their last good probe.
const (
	rankReady = iota
	rankStale
	rankRefused
)

type cand struct {
	rt   *routes.Route
	st   *replicaState
	rank int
	// full is set, with flow control on, for a replica that has no room
	// (free): it sorts after the replicas of its rank that have.
	full  bool
	load  float64
	tie   uint64
	depth int
	// home is the replica's rendezvous score for the prompt's anchor
	// (prefix policy).
	home uint64
	// kvFull is the part of load that a KV cache past KVFull adds.
	kvFull float64
}

// before is the load order: rank, room, then load, then the tie-break
// hash.
func (c *cand) before(d *cand) bool {
	if c.rank != d.rank {
		return c.rank < d.rank
	}
	if c.full != d.full {
		return !c.full
	}
	if c.load != d.load {
		return c.load < d.load
	}
	return c.tie > d.tie
}

// Choose orders reps (a snapshot's Replicas for the model) for req.
func (b *Balancer) Choose(reps []*routes.Route, req Request) Decision {
	if len(reps) == 0 {
		return Decision{}
	}
	now := b.now()
	ms := b.model(req.Model)
	var buf [8]cand
	cs := buf[:0]
	for _, rt := range reps {
		st := b.replica(rt.Group)
		c := cand{rt: rt, st: st}
		c.rank, c.load, c.kvFull = b.score(st, rt, now)
		c.full = b.cfg.Flow && c.rank != rankRefused && b.free(st, rt, now) <= 0
		cs = append(cs, c)
	}
	d := Decision{Order: make([]*routes.Route, len(cs))}
	switch b.cfg.Policy {
	case First, RoundRobin:
		start := 0
		if b.cfg.Policy == RoundRobin {
			start = int(ms.rr.Add(1) % uint64(len(cs)))
		}
		// The fixed order, except that replicas which refused since
		// their last probe go last.
		i := 0
		for pass := 0; pass < 2; pass++ {
			for k := range cs {
				c := &cs[(start+k)%len(cs)]
				if (c.rank == rankRefused) == (pass == 1) {
					d.Order[i] = c.rt
					i++
				}
			}
		}
		d.Reason = Order
		return d
	}

	// Ties in load go by a hash of the first prompt block (or a rotating
	// counter when there is none): distinct prompts spread even when
	// every replica is idle, and the same prompt lands the same way.
	seed := ms.rr.Add(1)
	if len(req.Keys) > 0 {
		seed = req.Keys[0]
	}
	for i := range cs {
		cs[i].tie = hrw(seed, cs[i].rt.Group)
	}
	sortCands(cs)
	least := &cs[0]
	pick, reason := 0, Load

	switch b.cfg.Policy {
	case Prefix:
		if len(req.Keys) > 0 {
			depth := make([]int, len(cs))
			groups := make([]string, len(cs))
			for i := range cs {
				groups[i] = cs[i].rt.Group
			}
			ms.ix.match(req.Keys, groups, depth)
			for i := range cs {
				cs[i].depth = depth[i]
			}
			pick, reason = b.prefix(cs, req.Keys, now)
		}
	case Session:
		if req.Session != "" {
			key := xxhash.Sum64String(req.Session)
			best, bestH := -1, uint64(0)
			for i := range cs {
				if h := hrw(key, cs[i].rt.Group); best < 0 || h > bestH {
					best, bestH = i, h
				}
			}
			if b.withinLoad(&cs[best], least, b.cfg.Threshold) {
				pick, reason = best, Affinity
			} else {
				// The session's replica is saturated: the next by the
				// same hash that is not, else the least loaded.
				reason = Fallback
				next, nextH := -1, uint64(0)
				for i := range cs {
					if i == best || !b.withinLoad(&cs[i], least, b.cfg.Threshold) {
						continue
					}
					if h := hrw(key, cs[i].rt.Group); next < 0 || h > nextH {
						next, nextH = i, h
					}
				}
				if next >= 0 {
					pick = next
				}
			}
		}
	}
	d.Order[0] = cs[pick].rt
	d.Matched = cs[pick].depth
	i := 1
	for k := range cs {
		if k != pick {
			d.Order[i] = cs[k].rt
			i++
		}
	}
	d.Reason = reason
	return d
}

// prefix picks among cs (in load order, with each replica's match depth)
// for a prompt by walking the replicas in the rendezvous order of the
// prompt's anchor block, which is the same on every router:
//
//  1. the first replica that holds a long match of the prompt
//     (MinAffinityShare of it), or is the prompt's home (the first in
//     the order) while another does and the match is AnchorBlocks or
//     longer, whose load is within Threshold of the least-loaded
//     replica's, or whose engine has queued at most Threshold more
//     requests than the least-loaded replica's (none when it has room),
//     or any when the least loaded has no room (keeps). With flow
//     control on, it need not have room: a wait in its engine's queue
//     keeps one copy of the prefix warm, where taking whichever replica
//     has room would keep every copy warm and crowd the caches.
//  2. else the first replica within HomeSlack of the least loaded (the
//     least loaded itself at the latest): a new prompt's home, and the
//     next replica of its order when the home is busy or the holders
//     are past Threshold.
//
// With fresh engine numbers, what moves a prefix off its holder is the
// holder's queue, not its load: a request there joins the running batch
// as soon as a slot frees and prefills only its own tail, however large
// the batch, where a spill is a cold prefill of the whole prefix on
// another replica that holds up that replica's prefill and takes cache
// space other prefixes held, which brings cold prefills and queues
// there in turn. Nor does a prefix move onto a replica that has no room
// either. Load alone moves a prefix only once the numbers are stale.
// Routers behind a balancer see each other's requests only through
// scrapes, and each spills on the same short queue: spills on load, or
// on any queue, cascaded in the fleet and cost it its p90 TTFT
// (bench/routing's sustained comparison).
//
// A prefix therefore lives on its home while the home's queue is short
// or its load within Threshold of the least loaded, spills onto the same
// replica from every router when it is not, and flows back when it is
// again, so a spilled copy ages out of its cache instead of doubling the
// prefix's footprint. The home counts as a holder of a recurring long prefix
// even when this router never sent it there: routers share no index,
// and the other routers' requests keep it warm there (this router pays
// one miss if none did). The anchor is the prompt's AnchorBlocks-th
// block, or the last block of the longest match when that is shorter.
// Routers walk the same order over loads that differ only by their
// scrapes' age, so they agree on a replica without telling each other
// anything.
func (b *Balancer) prefix(cs []cand, keys []uint64, now time.Time) (int, Reason) {
	n := len(keys)
	deepest := 0
	for i := range cs {
		deepest = max(deepest, cs[i].depth)
	}
	held := longMatch(deepest, n)
	// The anchor lies in the part of the prompt a holder has, when one
	// has a long match: requests sharing that part walk alike.
	a := min(n, AnchorBlocks)
	if held {
		a = min(a, deepest)
	}
	anchor := keys[a-1]
	// The home is presumed warm only for a prefix of AnchorBlocks or
	// more, whose anchor every request and every router shares.
	presume := held && deepest >= AnchorBlocks
	var buf [8]int
	order := buf[:0]
	for i := range cs {
		cs[i].home = hrw(anchor, cs[i].rt.Group)
		order = append(order, i)
	}
	slices.SortFunc(order, func(x, y int) int { return cmp.Compare(cs[y].home, cs[x].home) })
	least := &cs[0]
	for k, i := range order {
		c := &cs[i]
		holds := longMatch(c.depth, n)
		if !holds && (k > 0 || !presume) {
			continue
		}
		// A full KV cache does not weigh on a replica that holds the
		// prefix: the request needs few new blocks there.
		h := *c
		h.load -= c.kvFull
		ok := b.withinLoad(&h, least, b.cfg.Threshold) || b.keeps(c, least, now)
		switch {
		case ok && holds:
			return i, Affinity
		case ok:
			return i, Home
		}
	}
	for k, i := range order {
		if !b.within(&cs[i], least, HomeSlack) {
			continue
		}
		switch {
		case held:
			return i, Fallback
		case k == 0:
			return i, Home
		}
		return i, Load
	}
	return 0, Load // unreachable: the least loaded is within any slack of itself
}

// longMatch reports whether blocks of an n-block prompt are enough for
// affinity to carry load (MinAffinityShare).
func longMatch(blocks, n int) bool { return float64(blocks) >= MinAffinityShare*float64(n) }

// within reports whether c may take a request it is preferred for: it is
// no less available than the least-loaded replica, has room when that
// one has (flow control), and carries at most allow more load.
func (b *Balancer) within(c, least *cand, allow float64) bool {
	return (!c.full || least.full) && b.withinLoad(c, least, allow)
}

// withinLoad is within without the room test, for a choice worth a wait
// in the engine's queue (a long prefix match, a session).
func (b *Balancer) withinLoad(c, least *cand, allow float64) bool {
	return c.rank <= least.rank && c.load <= least.load+allow
}

func sortCands(cs []cand) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].before(&cs[j-1]); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// hrw is a rendezvous (highest random weight) score of group for key: the
// same key ranks the groups the same way in every process, and removing
// one group moves only the keys that ranked it first.
func hrw(key uint64, group string) uint64 {
	return chain(key, xxhash.Sum64String(group))
}

// score is a replica's rank and load. Load is the router's own in-flight
// count now (exact) plus the engine's requests that were not the
// router's at the last scrape (running + waiting − Own: other clients of
// the engine), plus the waiting requests once more, since a queue means
// the engine is full, plus Threshold when the KV cache is past KVFull
// (returned apart as full: a prompt whose prefix the engine holds needs
// few new blocks, so the prefix policy does not count it for holders).
// The scrape is up to a few hundred milliseconds old; subtracting what
// the router itself had in flight then keeps a stale count of the
// router's own requests from weighing twice. Without fresh engine numbers
// the load is the in-flight count alone and the rank is stale.
func (b *Balancer) score(st *replicaState, rt *routes.Route, now time.Time) (rank int, load, full float64) {
	own := float64(st.inflight.Load())
	rank = rankReady
	if r := st.refused.Load(); r != 0 {
		if rt.Probed.UnixNano() > r {
			st.refused.CompareAndSwap(r, 0) // a probe succeeded since
		} else {
			rank = rankRefused
		}
	}
	l := st.load.Load()
	if !b.fresh(l, now) {
		return max(rank, rankStale), own, 0
	}
	load = own + others(l) + waitingNow(st, l)
	if l.HasKV && l.KV >= KVFull {
		full = b.cfg.Threshold
	}
	return rank, load + full, full
}

// waitingNow is the engine's queue as of the last scrape, less one for
// each of the router's requests to it that ended since: an engine takes
// a waiting request in as soon as a running one finishes. Without this,
// the router's own requests that were queued at the scrape would weigh
// twice (in the live in-flight count and in the scraped queue) until the
// next scrape, long after the engine had taken them in.
func waitingNow(st *replicaState, l *EngineLoad) float64 {
	return max(0, l.Waiting-float64(st.ended.Load()-l.Ended))
}

// unlimited is Free's answer when nothing bounds a replica.
const unlimited = 1 << 30

// Free is how many more requests reps (a model's replicas) take before
// every one is saturated, for flow control. A replica has no room when it
// refused a connection since its last probe, when its engine queues
// (waitingNow) or its KV cache is at SaturatedKV, or when the router's
// requests in flight to it plus the engine's other work reach its
// capacity: MaxInflight, else the running count at which the engine was
// last seen queueing. A replica without fresh numbers and no MaxInflight
// is not held back: with nothing known, the engine decides as it would
// without flow control. Nor is a model whose every replica refused: its
// requests are not waiting for capacity, and get the proxy's answer for
// an engine that is down at once.
func (b *Balancer) Free(reps []*routes.Route) int {
	now := b.now()
	total, refused := 0, 0
	for _, rt := range reps {
		st := b.replica(rt.Group)
		if r := st.refused.Load(); r != 0 && rt.Probed.UnixNano() <= r {
			refused++
			continue
		}
		total += b.free(st, rt, now)
		if total >= unlimited {
			return unlimited
		}
	}
	if refused > 0 && refused == len(reps) {
		return unlimited
	}
	return total
}

// keeps reports whether a holder past Threshold of the least-loaded
// replica keeps its prompt all the same, going by the engines' numbers:
// while its engine has queued at most Threshold more requests than the
// least-loaded replica's (none when it has room: the request joins the
// running batch and prefills only its own tail), or while the least
// loaded is known to have no room either (a spill would wait there as
// well, behind a cold prefill of the whole prefix).
func (b *Balancer) keeps(c, least *cand, now time.Time) bool {
	hq, hk := b.queued(c.st, now)
	lq, lk := b.queued(least.st, now)
	if hk && lk && c.rank <= least.rank && hq <= lq+b.cfg.Threshold {
		return true
	}
	return lk && b.free(least.st, least.rt, now) <= 0
}

// queued is how many requests a replica's engine has beyond those it runs
// at once, when its numbers are fresh (known): its queue (waitingNow), or
// the router's in flight plus the engine's others past its capacity,
// whichever is more. The running batch does not count: a request that
// joins it starts at once, whatever its size.
func (b *Balancer) queued(st *replicaState, now time.Time) (n float64, known bool) {
	l := st.load.Load()
	if !b.fresh(l, now) {
		return 0, false
	}
	n = waitingNow(st, l)
	if capacity := b.capacity(st); capacity > 0 {
		n = max(n, float64(st.inflight.Load())+others(l)-float64(capacity))
	}
	return n, true
}

// capacity is how many requests a replica's engine runs at once, as far
// as the router knows: MaxInflight, else the learned capacity (0: not
// known).
func (b *Balancer) capacity(st *replicaState) int64 {
	if b.cfg.MaxInflight > 0 {
		return int64(b.cfg.MaxInflight)
	}
	return st.learned.Load()
}

// others is the engine's work that was not the router's at the scrape.
func others(l *EngineLoad) float64 { return max(0, l.Running+l.Waiting-l.Own) }

// fresh reports whether an engine's numbers can be believed at now: read
// without error, and not older than staleAfter.
func (b *Balancer) fresh(l *EngineLoad, now time.Time) bool {
	return l != nil && l.OK && now.Sub(l.At) <= b.cfg.staleAfter()
}

// free is one replica's room (one that has not refused a connection).
func (b *Balancer) free(st *replicaState, rt *routes.Route, now time.Time) int {
	own := st.inflight.Load()
	capacity := int64(b.cfg.MaxInflight)
	l := st.load.Load()
	if !b.fresh(l, now) {
		if capacity > 0 {
			return int(max(0, capacity-own))
		}
		return unlimited
	}
	if waitingNow(st, l) > 0 || (l.HasKV && l.KV >= b.cfg.SaturatedKV) {
		return 0
	}
	capacity = b.capacity(st)
	if capacity == 0 {
		return unlimited
	}
	return int(max(0, capacity-own-int64(others(l))))
}

// ChooseAndStart is Choose, then Start on the first replica of the order.
// With flow control on, the two are one step for each of a model's
// requests: requests that flow control lets go together (several ended at
// once) each see the others' choices, instead of all taking the last
// free slot of one replica while another's stays free. The ticket is nil
// when reps is empty.
func (b *Balancer) ChooseAndStart(reps []*routes.Route, req Request) (Decision, *Ticket) {
	if b.cfg.Flow {
		ms := b.model(req.Model)
		ms.starting.Lock()
		defer ms.starting.Unlock()
	}
	d := b.Choose(reps, req)
	if len(d.Order) == 0 {
		return d, nil
	}
	return d, b.Start(req, d.Order[0], d.Reason, d.Matched)
}

// Ticket is one attempt to send a request to a replica; End it when the
// request is over (or refused).
type Ticket struct {
	st   *replicaState
	done atomic.Bool
}

// Start records that req goes to rt for reason (Refused when an earlier
// replica of the order refused it), with matched prompt blocks already on
// rt: the replica's in-flight count rises until End, and the prompt's
// blocks are indexed as rt's at once, so a burst sharing a prefix follows
// the first request before it is answered.
func (b *Balancer) Start(req Request, rt *routes.Route, reason Reason, matched int) *Ticket {
	st := b.replica(rt.Group)
	st.inflight.Add(1)
	b.m.decision(req.Model, rt.Group, reason)
	if b.cfg.Policy == Prefix && len(req.Keys) > 0 {
		ix := b.model(req.Model).ix
		ix.insert(req.Keys, rt.Group)
		b.m.prefix(req.Model, matched, len(req.Keys), ix.size())
	}
	return &Ticket{st: st}
}

// End ends the attempt; calling it again does nothing.
func (t *Ticket) End() {
	if t != nil && t.done.CompareAndSwap(false, true) {
		t.st.inflight.Add(-1)
		t.st.ended.Add(1)
	}
}

// Refuse marks rt as having refused a connection: it sorts after every
// replica that did not until a probe of its group succeeds.
func (b *Balancer) Refuse(model string, rt *routes.Route) {
	b.replica(rt.Group).refused.Store(max(b.now().UnixNano(), rt.Probed.UnixNano()))
	b.m.refusal(model, rt.Group)
}

// Observe records an engine's load for group, and learns its capacity
// for Free: the most it ran over the last learnWindow scrapes that found
// it queueing; and, once learned, an
// eighth more (at least one), at most every GrowEvery, when the engine
// runs that many with nobody waiting and room in its KV cache, so a
// capacity first seen low (a burst of long prompts) grows back to what
// the engine takes instead of leaving it idle while requests wait in the
// router. Each raise past the true capacity queues a request or two in
// the engine, behind which the requests flow control let go wait: so it
// is rare, not every scrape, and rarer after each raise that the engine
// answered by queueing (growWait), until one finds it running more.
func (b *Balancer) Observe(group string, l EngineLoad) {
	st := b.replica(group)
	if run := int64(l.Running); l.OK && run > 0 {
		learned := st.learned.Load()
		switch {
		case l.Waiting > 0:
			// The most it ran while queueing, over the last few such
			// scrapes: a scrape that falls between a request's end and
			// the next's start sees one slot free and a queue, and must
			// not shrink the capacity by it.
			st.queuedAt[st.queuedN%learnWindow] = run
			st.queuedN++
			most := run
			for _, v := range st.queuedAt[:min(st.queuedN, learnWindow)] {
				most = max(most, v)
			}
			st.learned.Store(most)
			if st.grewFrom > 0 && most <= st.grewFrom {
				// The raise found nothing more: wait longer next time.
				st.grewFrom = 0
				st.growFails++
			}
		case st.grewFrom > 0 && run > st.grewFrom:
			// The engine ran more than before the raise without a queue.
			st.grewFrom, st.growFails = 0, 0
		case learned > 0 && run >= learned && !(l.HasKV && l.KV >= b.cfg.SaturatedKV) &&
			l.At.UnixNano()-st.grown.Load() >= int64(growWait(st.growFails)):
			st.grewFrom = learned
			st.learned.Store(run + max(1, run/8))
			st.grown.Store(l.At.UnixNano())
		}
	}
	st.load.Store(&l)
}

// GrowEvery is how often a learned capacity may be raised; each raise in
// a row that only made the engine queue doubles it, up to GrowEveryMax.
const (
	GrowEvery    = 5 * time.Second
	GrowEveryMax = time.Minute
)

// growWait is the wait before the next raise after fails failed ones.
func growWait(fails int) time.Duration {
	return min(GrowEvery<<min(fails, 8), GrowEveryMax)
}

// learnWindow is how many queueing scrapes the learned capacity is the
// most of.
const learnWindow = 8

// Capacity is the engine's capacity as learned for group (0: not seen
// queueing yet).
func (b *Balancer) Capacity(group string) int64 { return b.replica(group).learned.Load() }

// ReplicaInfo is one replica's routing state (/status.json, /stats.json).
type ReplicaInfo struct {
	// State is "ready", "stale" (no fresh engine numbers: counted busy)
	// or "refused" (refused a connection since its last good probe).
	State    string
	Inflight int64
	// Load is the load the policies compare.
	Load float64
	// Decisions counts the requests for rt.Model sent to rt, by reason.
	Decisions map[string]float64
}

// Info returns rt's routing state.
func (b *Balancer) Info(rt *routes.Route) ReplicaInfo {
	st := b.replica(rt.Group)
	rank, load, _ := b.score(st, rt, b.now())
	return ReplicaInfo{State: [...]string{"ready", "stale", "refused"}[rank], Inflight: st.inflight.Load(), Load: load,
		Decisions: b.m.counts(rt.Model, rt.Group)}
}
