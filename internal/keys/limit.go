package keys

import (
	"fmt"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fe64bb06/frontdoor/internal/httpx"
)

// bucket is a per-minute budget refilled continuously: full at limit,
// limit/60 back every second. A limit of 0 is no limit.
type bucket struct {
	limit float64
	level float64
	last  time.Time
}

func (b *bucket) refill(now time.Time) {
	if b.limit <= 0 {
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = math.Min(b.limit, b.level+dt*b.limit/60)
	}
	b.last = now
}

// setLimit changes the limit, keeping the level (clamped), so a reload
// never hands a key a fresh budget.
func (b *bucket) setLimit(limit int64, now time.Time) {
	l := float64(limit)
	if b.limit <= 0 {
		b.level = l // a new limit starts full
	}
	b.limit, b.last = l, now
	b.level = math.Min(b.level, l)
}

// wait is how long until the level reaches want.
func (b *bucket) wait(want float64) time.Duration {
	if b.level >= want || b.limit <= 0 {
		return 0
	}
	return time.Duration((want - b.level) / (b.limit / 60) * float64(time.Second))
}

// full is how long until the bucket is full again.
func (b *bucket) full() time.Duration { return b.wait(b.limit) }

// state is one key id's limiter and usage: it outlives reloads.
type state struct {
	id       string
	inflight atomic.Int64

	prompt, completion, cached, counted, images atomic.Uint64

	mu         sync.Mutex // guards the buckets and the maps
	req, units bucket
	codes      map[int]uint64
	rejections map[Reason]uint64
}

func newState(id string) *state {
	return &state{id: id, codes: map[int]uint64{}, rejections: map[Reason]uint64{}}
}

func (st *state) reject(r Reason) {
	st.mu.Lock()
	st.rejections[r]++
	st.codes[http.StatusForbidden]++
	st.mu.Unlock()
}

// Key is one key in force. Its exported fields are read-only.
type Key struct {
	ID       string
	Models   []string
	Priority Priority
	// Weight is the entry's weight, 1 when unset.
	Weight float64
	// RPM, Units (tpm or ipm, by Product) and MaxConcurrent: 0 no limit.
	RPM, Units, MaxConcurrent int64
	Expires                   time.Time // zero: never

	product Product
	// hdr holds the header names and limit values that do not change
	// while the key is in force, made once at load.
	hdr      *headerText
	globs    []string // Models with "/" turned to "\x00", so "*" spans it
	disabled bool
	hash     [32]byte
	st       *state
	now      func() time.Time
}

// Allows reports whether model is in the key's scope (empty Models: all).
// A pattern is a path.Match glob in which "*" also matches "/", so "*"
// covers "org/model" and "org/*" every model of org.
func (k *Key) Allows(model string) bool {
	if len(k.globs) == 0 {
		return true
	}
	name := model
	if strings.IndexByte(name, '/') >= 0 {
		name = strings.ReplaceAll(name, "/", "\x00")
	}
	for _, g := range k.globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// Scope is nil when model is in scope, else the 403 refusal (reason
// model_scope), counted in the key's usage.
func (k *Key) Scope(model string) *Rejection {
	if k.Allows(model) {
		return nil
	}
	k.st.reject(ModelScope)
	return &Rejection{Status: http.StatusForbidden, Reason: ModelScope, Key: k,
		Message: fmt.Sprintf("key %s may not use model %q; its models are %s", k.ID, model, strings.Join(k.Models, ", "))}
}

// limits is the rate-limit state of a key at one moment, for headers.
type limits struct {
	hdr                *headerText
	rpm, units         int64
	remReq, remUnits   int64
	resetReq, resetUns time.Duration
}

// headerText is a key's rate-limit header names (by its product's unit)
// and its limits as text.
type headerText struct {
	limitUnits, remainingUnits, resetUnits string
	rpm, units                             string
}

func newHeaderText(k *Key) *headerText {
	name := "Tokens"
	if k.product.Unit == Images {
		name = "Images"
	}
	return &headerText{limitUnits: "X-Ratelimit-Limit-" + name, remainingUnits: "X-Ratelimit-Remaining-" + name,
		resetUnits: "X-Ratelimit-Reset-" + name, rpm: strconv.FormatInt(k.RPM, 10), units: strconv.FormatInt(k.Units, 10)}
}

func (k *Key) snapshot() limits {
	st := k.st
	return limits{hdr: k.hdr, rpm: k.RPM, units: k.Units,
		remReq: int64(math.Max(0, math.Floor(st.req.level))), remUnits: int64(math.Max(0, math.Floor(st.units.level))),
		resetReq: st.req.full(), resetUns: st.units.full()}
}

// Admit takes one request of the key's per-minute budget and a concurrency
// slot, or refuses with 429 (reason rpm, tpm, ipm or concurrency) and the
// wait after which the same request would be admitted. The unit budget
// admits while anything is left of it (a request's units are charged when
// known, and may take it below zero, as OpenAI does). Every Grant must be
// ended with Done.
func (k *Key) Admit() (*Grant, *Rejection) {
	now := k.now()
	st := k.st
	st.mu.Lock()
	st.req.refill(now)
	st.units.refill(now)
	var reason Reason
	var wait time.Duration
	switch {
	case k.MaxConcurrent > 0 && st.inflight.Load() >= k.MaxConcurrent:
		// Nothing says when a request ends; a second is a fair retry.
		reason, wait = Concurrency, time.Second
	case k.RPM > 0 && st.req.level < 1:
		reason, wait = RPMLimit, st.req.wait(1)
	case k.Units > 0 && st.units.level <= 0:
		reason, wait = TPMLimit, st.units.wait(math.Nextafter(0, 1))+time.Millisecond
		if k.product.Unit == Images {
			reason = IPMLimit
		}
	}
	if reason != "" {
		st.rejections[reason]++
		st.codes[http.StatusTooManyRequests]++
		l := k.snapshot()
		st.mu.Unlock()
		what := map[Reason]string{Concurrency: fmt.Sprintf("%d requests at once", k.MaxConcurrent),
			RPMLimit: fmt.Sprintf("%d requests per minute", k.RPM), TPMLimit: fmt.Sprintf("%d tokens per minute", k.Units),
			IPMLimit: fmt.Sprintf("%d images per minute", k.Units)}[reason]
		return nil, &Rejection{Status: http.StatusTooManyRequests, Reason: reason, Key: k, RetryAfter: wait, limits: &l,
			Message: fmt.Sprintf("key %s is over its limit of %s; retry after %s", k.ID, what, ceilMS(wait))}
	}
	if k.RPM > 0 {
		st.req.level--
	}
	st.inflight.Add(1)
	l := k.snapshot()
	st.mu.Unlock()
	return &Grant{key: k, limits: l}, nil
}

// Grant is one admitted request of a key.
type Grant struct {
	key    *Key
	limits limits
	done   atomic.Bool
}

// Key is the key the grant belongs to.
func (g *Grant) Key() *Key { return g.key }

// SetHeaders writes the rate-limit headers of the key as of admission
// (x-ratelimit-{limit,remaining,reset}-{requests,tokens|images}), for the
// limits the key has.
func (g *Grant) SetHeaders(h http.Header) { g.limits.set(h) }

// rateLimitHeaders are every name limits.set may write, for either unit.
var rateLimitHeaders = [...]string{
	"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
	"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens",
	"X-Ratelimit-Limit-Images", "X-Ratelimit-Remaining-Images", "X-Ratelimit-Reset-Images",
}

// DropHeaders removes every rate-limit header from an upstream's answer
// before it is copied to the client, so that the key's own, set at
// admission, stand: an engine or model server cannot speak for a key's
// budget. Deleting is cheaper than writing the key's headers a second
// time over the copy.
func DropHeaders(h http.Header) {
	for _, k := range rateLimitHeaders {
		delete(h, k)
	}
}

// set writes the headers into h under their canonical names. This runs
// on every request of a key, so the changing values are formatted into
// one buffer and share one string, and the six values one slice.
func (l *limits) set(h http.Header) {
	n := 0
	if l.rpm > 0 {
		n += 3
	}
	if l.units > 0 {
		n += 3
	}
	if n == 0 {
		return
	}
	var buf [96]byte
	b := buf[:0]
	var ends [4]int
	if l.rpm > 0 {
		b = strconv.AppendInt(b, l.remReq, 10)
		ends[0] = len(b)
		b = appendCeilMS(b, l.resetReq)
		ends[1] = len(b)
	}
	if l.units > 0 {
		b = strconv.AppendInt(b, l.remUnits, 10)
		ends[2] = len(b)
		b = appendCeilMS(b, l.resetUns)
		ends[3] = len(b)
	}
	text := string(b)
	v := make([]string, 0, n)
	put := func(name, val string) {
		v = append(v, val)
		h[name] = v[len(v)-1 : len(v) : len(v)]
	}
	if l.rpm > 0 {
		put("X-Ratelimit-Limit-Requests", l.hdr.rpm)
		put("X-Ratelimit-Remaining-Requests", text[:ends[0]])
		put("X-Ratelimit-Reset-Requests", text[ends[0]:ends[1]])
	}
	if l.units > 0 {
		start := ends[1]
		put(l.hdr.limitUnits, l.hdr.units)
		put(l.hdr.remainingUnits, text[start:ends[2]])
		put(l.hdr.resetUnits, text[ends[2]:ends[3]])
	}
}

// ceilMS renders d rounded up to the millisecond the way OpenAI's reset
// headers read ("0s", "250ms", "1.5s", "6m0s").
func ceilMS(d time.Duration) string { return string(appendCeilMS(nil, d)) }

// appendCeilMS appends ceilMS(d) to b: time.Duration's String format
// for a whole number of milliseconds, without its allocation.
func appendCeilMS(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1000 {
		return append(strconv.AppendInt(b, ms, 10), "ms"...)
	}
	if h := ms / 3600000; h > 0 {
		b = append(strconv.AppendInt(b, h, 10), 'h')
		ms -= h * 3600000
		b = append(strconv.AppendInt(b, ms/60000, 10), 'm')
		ms %= 60000
	} else if m := ms / 60000; m > 0 {
		b = append(strconv.AppendInt(b, m, 10), 'm')
		ms %= 60000
	}
	b = strconv.AppendInt(b, ms/1000, 10)
	if frac := ms % 1000; frac > 0 {
		b = append(b, '.')
		digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := 3
		for n > 0 && digits[n-1] == '0' {
			n--
		}
		b = append(b, digits[:n]...)
	}
	return append(b, 's')
}

// Charge adds units to the request's usage and to the key's per-minute
// budget. It may be called more than once (the router charges a stream's
// usage when the usage frame passes).
func (g *Grant) Charge(c Charge) {
	st := g.key.st
	c.Prompt, c.Completion, c.Cached, c.Images = max(c.Prompt, 0), max(c.Completion, 0), max(c.Cached, 0), max(c.Images, 0)
	st.prompt.Add(uint64(c.Prompt))
	st.completion.Add(uint64(c.Completion))
	st.cached.Add(uint64(c.Cached))
	st.images.Add(uint64(c.Images))
	n := c.Prompt + c.Completion
	if c.Counted {
		st.counted.Add(uint64(n))
	}
	if g.key.product.Unit == Images {
		n = c.Images
	}
	if g.key.Units > 0 && n > 0 {
		st.mu.Lock()
		st.units.refill(g.key.now())
		st.units.level -= float64(n)
		st.mu.Unlock()
	}
}

// Done ends the request with the status its client got (499: the client
// went away), releases its concurrency slot and counts it. Safe to call
// once only; a nil Grant is a no-op.
func (g *Grant) Done(status int) {
	if g == nil || !g.done.CompareAndSwap(false, true) {
		return
	}
	st := g.key.st
	st.inflight.Add(-1)
	st.mu.Lock()
	st.codes[status]++
	st.mu.Unlock()
}

// Rejection is a refused request: what to answer.
type Rejection struct {
	// Status is 401, 403 or 429.
	Status int
	Reason Reason
	// Message says what failed and what to do, naming the key by id only.
	Message string
	// RetryAfter is the wait after which the request would be admitted
	// (429 only).
	RetryAfter time.Duration
	// Key is the key refused; nil for 401 and bad_key_rate.
	Key *Key

	limits *limits // the key's, for a 429 of its limits
	realm  string
}

// SetHeaders writes the refusal's headers: WWW-Authenticate for 401;
// Retry-After (whole seconds, rounded up), retry-after-ms and the
// x-ratelimit-* headers for 429.
func (r *Rejection) SetHeaders(h http.Header) {
	switch r.Status {
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="`+r.realm+`"`)
	case http.StatusTooManyRequests:
		httpx.SetRetryAfter(h, r.RetryAfter)
		if r.limits != nil && r.Key != nil {
			r.limits.set(h)
		}
	}
}
