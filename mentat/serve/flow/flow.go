// Package flow holds a model's requests in the router while every replica
// of it is saturated, and lets them go one at a time as capacity frees:
// critical before standard before sheddable, fair between the tenants of a
// band by weighted tokens, in arrival order inside a tenant. A request
// that finds capacity and nobody waiting passes without waiting (one
// mutex, no allocation); a wait is bounded by its band's time and length
// limits, past which it is refused with a retry time estimated from the
// model's drain rate.
//
// The controller does not know replicas: the proxy gives it a Capacity
// function (package balance's view of a model's replicas) and tells it
// when a request it let through was sent and when it ended, so capacity
// freed by the router's own completions is handed on at once; capacity
// freed by other clients of the engines is seen on the next Tick.
package flow

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/keys"
	"github.com/fe64bb06/frontdoor/internal/series"
)

// Band is a priority band; lower is served first.
type Band int8

const (
	Critical Band = iota
	Standard
	Sheddable
	NumBands
)

var bandNames = [NumBands]string{"critical", "standard", "sheddable"}

func (b Band) String() string {
	if b < 0 || b >= NumBands {
		return "standard"
	}
	return bandNames[b]
}

// BandOf is a key's priority as a band.
func BandOf(p keys.Priority) Band {
	switch p {
	case keys.Critical:
		return Critical
	case keys.Sheddable:
		return Sheddable
	}
	return Standard
}

// ParseBand reads a band name (an X-Priority header); ok is false for
// anything else.
func ParseBand(s string) (Band, bool) {
	for b, n := range bandNames {
		if s == n {
			return Band(b), true
		}
	}
	return Standard, false
}

// Config is the controller's limits, per model and band.
type Config struct {
	// MaxWait is how long a request of each band may wait.
	MaxWait [NumBands]time.Duration
	// MaxQueue is how many requests of each band may wait.
	MaxQueue [NumBands]int
	// MaxTotal is how many requests of all bands may wait; when it is
	// reached, a critical or standard request takes the place of the
	// sheddable request that arrived last.
	MaxTotal int
	// Burst is the credit, in tokens (per unit of weight), that a tenant
	// coming back from idle may have over the band's virtual time: up to
	// that much of its work goes ahead of tenants that never stopped, so
	// a light tenant's burst is not served at only its share while a
	// flooding tenant holds the rest. It bounds how far fair shares may
	// drift: by Burst per return from idle.
	Burst float64
}

// Defaults of Config (the FLOW_* variables).
var (
	DefaultMaxWait  = [NumBands]time.Duration{60 * time.Second, 30 * time.Second, 10 * time.Second}
	DefaultMaxQueue = [NumBands]int{1000, 1000, 1000}
)

// DefaultMaxTotal is Config.MaxTotal's default.
const DefaultMaxTotal = 2000

// DefaultBurst is Config.Burst's default, in tokens.
const DefaultBurst = 1000

// Capacity is how many more requests a model's replicas take now; 0 or
// less is saturated. The controller subtracts the requests it has let go
// that are not sent yet.
type Capacity func(model string) int

// Request is one request asking to go to a model.
type Request struct {
	Model string
	Band  Band
	// Tenant is who shares a band fairly (a key id, X-Tenant, or the
	// client's address); Label is what metrics call it (a key id, or "-"
	// for tenants a client names, which would be unbounded).
	Tenant, Label string
	// Weight is the tenant's share (a key's weight; 1 without).
	Weight float64
	// Cost is what the request is charged when it goes: its prompt's
	// tokens (an estimate); the answer's tokens are charged at Done.
	Cost float64
}

// Refusal is a request the controller will not hold: the proxy answers
// 429 with Retry-After.
type Refusal struct {
	// Reason is queue_full, queue_timeout or shed.
	Reason     string
	Band       Band
	RetryAfter time.Duration
	Message    string
}

func (r *Refusal) Error() string { return r.Message }

// Controller is the router's flow control, for every model. Create it
// with New and run Tick periodically (Run does).
type Controller struct {
	cfg  Config
	free Capacity
	now  func() time.Time
	m    *metrics

	mu     sync.Mutex
	models map[string]*modelQueue
}

// New returns a controller with cfg (zero fields take the defaults) and
// capacity free; its metrics are registered on reg (nil: not registered).
func New(cfg Config, free Capacity, reg prometheus.Registerer) *Controller {
	for b := range NumBands {
		if cfg.MaxWait[b] <= 0 {
			cfg.MaxWait[b] = DefaultMaxWait[b]
		}
		if cfg.MaxQueue[b] <= 0 {
			cfg.MaxQueue[b] = DefaultMaxQueue[b]
		}
	}
	if cfg.MaxTotal <= 0 {
		cfg.MaxTotal = DefaultMaxTotal
	}
	if cfg.Burst < 0 {
		cfg.Burst = 0
	}
	c := &Controller{cfg: cfg, free: free, now: time.Now, models: map[string]*modelQueue{}}
	c.m = newMetrics(c, reg)
	return c
}

// Config is the configuration in force.
func (c *Controller) Config() Config { return c.cfg }

// modelQueue is one model's waiting requests and counts. Guarded by the
// controller's mutex.
type modelQueue struct {
	name  string
	bands [NumBands]band
	// queued is the number waiting in all bands; pending the requests let
	// go and not sent yet (the capacity they will take); running those
	// let go and not ended.
	queued, pending, running int
	// drain is the recent completions, for retry estimates.
	drain rate
	// idleSince is when the queue last emptied (zero while it is not).
	idleSince time.Time
}

// band is one priority band of a model: its tenants, fair-queued by start
// tags (start-time fair queuing): each tenant's tag is what it has been
// served, in tokens per weight, since it last caught up with the band's
// virtual time; the tenant with the smallest tag goes next.
type band struct {
	tenants map[string]*tenant
	active  []*tenant // tenants with waiting requests
	vtime   float64
	queued  int
}

type tenant struct {
	name    string
	tag     float64
	weight  float64 // of its latest request
	waiting []*waiter
}

// waiter is one waiting request.
type waiter struct {
	req   Request
	at    time.Time
	ready chan struct{} // closed when it may go
	// refused is set (before ready is closed) when it is shed instead.
	refused *Refusal
	gone    bool // removed from its queue
}

// Admission is a request the controller let go. Call Sent once it is on
// its way to a replica (or it failed before) and Done when it ends.
type Admission struct {
	c      *Controller
	mq     *modelQueue
	req    Request
	Waited time.Duration
	sent   bool
	done   bool
}

// Admit lets r go at once when its model has capacity and nothing waits,
// else waits for its turn, its band's time limit, or ctx. It returns a
// *Refusal when the request is refused, ctx.Err() when ctx ended first
// (the request was never let go).
func (c *Controller) Admit(ctx context.Context, r Request) (*Admission, error) {
	if r.Band < 0 || r.Band >= NumBands {
		r.Band = Standard
	}
	if r.Weight <= 0 {
		r.Weight = 1
	}
	c.mu.Lock()
	mq := c.model(r.Model)
	if mq.queued == 0 && c.free(r.Model)-mq.pending > 0 {
		mq.pending++
		mq.running++
		c.mu.Unlock()
		c.m.dispatched(r, 0)
		return &Admission{c: c, mq: mq, req: r}, nil
	}
	now := c.now()
	if ref := c.makeRoom(mq, r); ref != nil {
		c.mu.Unlock()
		c.m.refused(r, ref.Reason)
		return nil, ref
	}
	w := &waiter{req: r, at: now, ready: make(chan struct{})}
	c.enqueue(mq, w)
	// Capacity may have freed between the check above and now.
	c.dispatchLocked(mq)
	c.mu.Unlock()

	timer := time.NewTimer(c.cfg.MaxWait[r.Band])
	defer timer.Stop()
	select {
	case <-w.ready:
	case <-ctx.Done():
	case <-timer.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-w.ready:
		if w.refused != nil {
			c.m.refused(r, w.refused.Reason)
			return nil, w.refused
		}
		if ctx.Err() != nil {
			// Let go, but its client left: it is never sent, and its
			// capacity goes to the next.
			mq.pending--
			mq.running--
			c.dispatchLocked(mq)
			return nil, ctx.Err()
		}
		waited := c.now().Sub(w.at)
		c.m.dispatched(r, waited)
		return &Admission{c: c, mq: mq, req: r, Waited: waited}, nil
	default:
	}
	c.remove(mq, w)
	if err := ctx.Err(); err != nil {
		c.m.refused(r, "client_gone")
		return nil, err
	}
	ref := &Refusal{Reason: "queue_timeout", Band: r.Band, RetryAfter: c.retryAfter(mq, r.Band),
		Message: fmt.Sprintf("model %s is saturated and this %s request waited %s, its band's limit, without a free replica; retry later",
			r.Model, r.Band, c.cfg.MaxWait[r.Band])}
	c.m.refused(r, ref.Reason)
	return nil, ref
}

// Sent records that the request is now counted by the replicas' capacity
// (or will never be): call it right after the balancer's Start.
func (a *Admission) Sent() {
	if a == nil || a.sent {
		return
	}
	a.sent = true
	a.c.mu.Lock()
	a.mq.pending--
	a.c.mu.Unlock()
}

// Done ends the request: tokens (its answer's, when known) are charged to
// its tenant, and the capacity it held goes to the next waiting request.
func (a *Admission) Done(tokens float64) {
	if a == nil || a.done {
		return
	}
	a.done = true
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !a.sent {
		a.sent = true
		a.mq.pending--
	}
	a.mq.running--
	a.mq.drain.add(c.now())
	if tokens > 0 {
		if t := a.mq.bands[a.req.Band].tenants[a.req.Tenant]; t != nil {
			t.tag += tokens / a.req.Weight
		}
	}
	c.dispatchLocked(a.mq)
}

// Tick hands freed capacity to waiting requests of every model (capacity
// that other clients of the engines freed, or a fresh scrape showed) and
// forgets the state of models that have been idle a while.
func (c *Controller) Tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for name, mq := range c.models {
		for i := range mq.bands {
			b := &mq.bands[i]
			for _, t := range b.tenants {
				c.forgetIdle(b, t)
			}
		}
		if mq.queued > 0 {
			c.dispatchLocked(mq)
			continue
		}
		if mq.running == 0 && mq.pending == 0 && !mq.idleSince.IsZero() && now.Sub(mq.idleSince) > time.Minute {
			delete(c.models, name)
		}
	}
}

// Dispatch hands the capacity there is now to waiting requests of every
// model: call it when the capacity function's view changed (a scrape).
func (c *Controller) Dispatch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, mq := range c.models {
		if mq.queued > 0 {
			c.dispatchLocked(mq)
		}
	}
}

// Run calls Tick every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, interval time.Duration) {
	series.Run(ctx, interval, func(context.Context, time.Time) { c.Tick() })
}

func (c *Controller) model(name string) *modelQueue {
	mq := c.models[name]
	if mq == nil {
		mq = &modelQueue{name: name}
		for b := range mq.bands {
			mq.bands[b].tenants = map[string]*tenant{}
		}
		c.models[name] = mq
	}
	return mq
}

// makeRoom checks r against the length limits: nil when it may wait
// (having shed the last sheddable request when the model's total was
// full), else r's refusal.
func (c *Controller) makeRoom(mq *modelQueue, r Request) *Refusal {
	full := func(what string, n int) *Refusal {
		return &Refusal{Reason: "queue_full", Band: r.Band, RetryAfter: c.retryAfter(mq, r.Band),
			Message: fmt.Sprintf("model %s is saturated and %d %s requests already wait for it; retry later", r.Model, n, what)}
	}
	if mq.bands[r.Band].queued >= c.cfg.MaxQueue[r.Band] {
		if c.crowdOut(mq, r) {
			return nil
		}
		return full(r.Band.String(), mq.bands[r.Band].queued)
	}
	if mq.queued < c.cfg.MaxTotal {
		return nil
	}
	if r.Band == Sheddable || mq.bands[Sheddable].queued == 0 {
		if c.crowdOut(mq, r) {
			return nil
		}
		return full("", mq.queued)
	}
	victim := c.lastSheddable(mq)
	c.remove(mq, victim)
	victim.refused = &Refusal{Reason: "shed", Band: Sheddable, RetryAfter: c.retryAfter(mq, Sheddable),
		Message: fmt.Sprintf("model %s is saturated and this sheddable request gave its place to one of a higher priority; retry later", r.Model)}
	close(victim.ready)
	return nil
}

// crowdOut makes room in r's band by refusing the newest request of the
// tenant with the most requests waiting there, when that is another
// tenant with at least two more than r's has: a full queue is then the
// flooding tenant's doing, and refusing r instead would let one tenant's
// burst lock every other tenant of the band out (the longest queue gives
// way, as in fair queuing's drop rule). It reports whether it made room.
func (c *Controller) crowdOut(mq *modelQueue, r Request) bool {
	b := &mq.bands[r.Band]
	var fat *tenant
	for _, t := range b.active {
		if fat == nil || len(t.waiting) > len(fat.waiting) {
			fat = t
		}
	}
	own := 0
	if t := b.tenants[r.Tenant]; t != nil {
		own = len(t.waiting)
	}
	if fat == nil || fat.name == r.Tenant || len(fat.waiting) < own+2 {
		return false
	}
	victim := fat.waiting[len(fat.waiting)-1]
	c.remove(mq, victim)
	victim.refused = &Refusal{Reason: "queue_full", Band: r.Band, RetryAfter: c.retryAfter(mq, r.Band),
		Message: fmt.Sprintf("model %s is saturated and its %s queue is full; this request gave its place to a tenant with fewer requests waiting; retry later", r.Model, r.Band)}
	close(victim.ready)
	return true
}

// lastSheddable is the sheddable request that arrived last.
func (c *Controller) lastSheddable(mq *modelQueue) *waiter {
	var last *waiter
	for _, t := range mq.bands[Sheddable].active {
		if w := t.waiting[len(t.waiting)-1]; last == nil || w.at.After(last.at) {
			last = w
		}
	}
	return last
}

func (c *Controller) enqueue(mq *modelQueue, w *waiter) {
	b := &mq.bands[w.req.Band]
	t := b.tenants[w.req.Tenant]
	if t == nil {
		t = &tenant{name: w.req.Tenant, tag: math.Inf(-1)}
		b.tenants[w.req.Tenant] = t
	}
	t.weight = w.req.Weight
	if len(t.waiting) == 0 {
		// A tenant that was idle comes back where it left, but at most
		// Burst behind the band's virtual time: what it did not use
		// while away is banked only up to that.
		t.tag = math.Max(t.tag, c.floor(b, t))
		b.active = append(b.active, t)
	}
	t.waiting = append(t.waiting, w)
	b.queued++
	mq.queued++
	mq.idleSince = time.Time{}
}

// remove takes w out of its queue (it left, timed out or was shed).
func (c *Controller) remove(mq *modelQueue, w *waiter) {
	if w == nil || w.gone {
		return
	}
	w.gone = true
	b := &mq.bands[w.req.Band]
	t := b.tenants[w.req.Tenant]
	for i, x := range t.waiting {
		if x == w {
			t.waiting = append(t.waiting[:i], t.waiting[i+1:]...)
			break
		}
	}
	if len(t.waiting) == 0 {
		c.deactivate(b, t)
	}
	b.queued--
	mq.queued--
	c.emptied(mq)
}

func (c *Controller) deactivate(b *band, t *tenant) {
	for i, x := range b.active {
		if x == t {
			b.active = append(b.active[:i], b.active[i+1:]...)
			break
		}
	}
	c.forgetIdle(b, t)
}

// floor is the lowest tag t may come back from idle with: Burst (per
// unit of t's weight) behind the band's virtual time.
func (c *Controller) floor(b *band, t *tenant) float64 {
	return b.vtime - c.cfg.Burst/t.weight
}

// forgetIdle drops idle tenant t when it is at or below its floor, where
// it would come back anyway: its state carries nothing, so tenants that
// come and go (client addresses) cost no memory. One that is above is
// kept until the band's virtual time passes it (Tick), so that coming
// back does not give it more credit than it has.
func (c *Controller) forgetIdle(b *band, t *tenant) {
	if len(t.waiting) == 0 && t.tag <= c.floor(b, t) {
		delete(b.tenants, t.name)
	}
}

func (c *Controller) emptied(mq *modelQueue) {
	if mq.queued == 0 {
		mq.idleSince = c.now()
	}
}

// dispatchLocked lets waiting requests go while the model has capacity:
// the first band with waiting requests, in it the tenant with the
// smallest tag, its oldest request.
func (c *Controller) dispatchLocked(mq *modelQueue) {
	for mq.queued > 0 && c.free(mq.name)-mq.pending > 0 {
		var b *band
		for i := range mq.bands {
			if mq.bands[i].queued > 0 {
				b = &mq.bands[i]
				break
			}
		}
		t := b.active[0]
		for _, x := range b.active[1:] {
			if x.tag < t.tag {
				t = x
			}
		}
		w := t.waiting[0]
		t.waiting = t.waiting[1:]
		w.gone = true
		b.vtime = math.Max(b.vtime, t.tag)
		t.tag += w.req.Cost / w.req.Weight
		if len(t.waiting) == 0 {
			c.deactivate(b, t)
		}
		b.queued--
		mq.queued--
		c.emptied(mq)
		mq.pending++
		mq.running++
		close(w.ready)
	}
}

// retryAfter estimates when a request of band would get its turn: the
// requests ahead of it (its band and those above) at the model's recent
// completion rate; without a rate, the band's time limit. At least 1 s.
func (c *Controller) retryAfter(mq *modelQueue, b Band) time.Duration {
	ahead := 1
	for i := Critical; i <= b; i++ {
		ahead += mq.bands[i].queued
	}
	r := mq.drain.perSecond(c.now())
	d := c.cfg.MaxWait[b]
	if r > 0 {
		d = time.Duration(float64(ahead) / r * float64(time.Second))
	}
	return min(max(d, time.Second), 10*time.Minute)
}

// Queued is how many requests of model wait in each band now.
func (c *Controller) Queued(model string) [NumBands]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [NumBands]int
	if mq := c.models[model]; mq != nil {
		for b := range out {
			out[b] = mq.bands[b].queued
		}
	}
	return out
}

// rate counts events over the last rateWindow in one-second buckets.
type rate struct {
	buckets [rateWindow]int
	sec     [rateWindow]int64
}

const rateWindow = 10

func (r *rate) add(now time.Time) {
	s := now.Unix()
	i := s % rateWindow
	if r.sec[i] != s {
		r.sec[i], r.buckets[i] = s, 0
	}
	r.buckets[i]++
}

// perSecond is the events per second over the last full window.
func (r *rate) perSecond(now time.Time) float64 {
	s := now.Unix()
	n := 0
	for i := range r.buckets {
		if s-r.sec[i] < rateWindow {
			n += r.buckets[i]
		}
	}
	return float64(n) / rateWindow
}
