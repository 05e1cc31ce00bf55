package keys

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/series"
)

// Usage is one key's usage since the process started, and its limits now.
type Usage struct {
	ID       string   `json:"id"`
	Priority string   `json:"priority"`
	Weight   float64  `json:"weight"`
	Models   []string `json:"models"`
	// State is "active", "disabled", "expired" or "removed".
	State string `json:"state"`
	// Limits: 0 is none.
	RPM           int64 `json:"rpm"`
	Units         int64 `json:"units_per_minute"`
	Unit          Unit  `json:"unit"`
	MaxConcurrent int64 `json:"max_concurrent"`
	// Remaining budget now (-1: no limit) and requests in flight.
	RemainingRequests int64 `json:"remaining_requests"`
	RemainingUnits    int64 `json:"remaining_units"`
	InFlight          int64 `json:"in_flight"`
	// Requests by answered status code ("200", "429", "499", ...), the
	// key's own refusals (403 scope, 429 limits) included.
	Requests map[string]uint64 `json:"requests"`
	// Tokens (router): prompt, completion, cached; counted is the part of
	// prompt+completion the router counted itself (Charge.Counted).
	PromptTokens     uint64 `json:"prompt_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`
	CachedTokens     uint64 `json:"cached_tokens"`
	CountedTokens    uint64 `json:"counted_tokens"`
	// Images (gateway).
	Images uint64 `json:"images"`
	// Rejections by Reason (only those with a key: scope and limits).
	Rejections map[string]uint64 `json:"rejections"`
}

// keyState is a key's state name at now.
func (k *Key) state(now time.Time) string {
	switch {
	case k.disabled:
		return "disabled"
	case !k.Expires.IsZero() && !now.Before(k.Expires):
		return "expired"
	}
	return "active"
}

// Usage is every key's usage and limits now, in file order, then keys that
// were removed or renamed but ran up usage since the process started.
func (s *Store) Usage() []Usage {
	now := s.now()
	set := s.cur.Load()
	out := make([]Usage, 0, len(set.keys)+1)
	seen := map[string]bool{}
	all := set.keys
	if set.operator != nil {
		all = append(append([]*Key(nil), set.keys...), set.operator)
	}
	for _, k := range all {
		seen[k.ID] = true
		u := s.usageOf(k.st, now)
		u.Priority, u.Weight, u.Models, u.State = k.Priority.String(), k.Weight, k.Models, k.state(now)
		u.RPM, u.Units, u.MaxConcurrent = k.RPM, k.Units, k.MaxConcurrent
		k.st.mu.Lock()
		k.st.req.refill(now)
		k.st.units.refill(now)
		u.RemainingRequests, u.RemainingUnits = -1, -1
		if k.RPM > 0 {
			u.RemainingRequests = int64(math.Max(0, math.Floor(k.st.req.level)))
		}
		if k.Units > 0 {
			u.RemainingUnits = int64(math.Max(0, math.Floor(k.st.units.level)))
		}
		k.st.mu.Unlock()
		if u.Models == nil {
			u.Models = []string{}
		}
		out = append(out, u)
	}
	s.mu.Lock()
	order := slices.Clone(s.order)
	states := make([]*state, len(order))
	for i, id := range order {
		states[i] = s.states[id]
	}
	s.mu.Unlock()
	for i, id := range order {
		if seen[id] {
			continue
		}
		u := s.usageOf(states[i], now)
		if len(u.Requests) == 0 && len(u.Rejections) == 0 {
			continue
		}
		u.State, u.Priority, u.Weight, u.Models = "removed", Standard.String(), 1, []string{}
		u.RemainingRequests, u.RemainingUnits = -1, -1
		out = append(out, u)
	}
	return out
}

func (s *Store) usageOf(st *state, now time.Time) Usage {
	u := Usage{ID: st.id, Unit: s.o.Product.Unit, InFlight: st.inflight.Load(),
		PromptTokens: st.prompt.Load(), CompletionTokens: st.completion.Load(), CachedTokens: st.cached.Load(),
		CountedTokens: st.counted.Load(), Images: st.images.Load(),
		Requests: map[string]uint64{}, Rejections: map[string]uint64{}}
	st.mu.Lock()
	for c, n := range st.codes {
		u.Requests[strconv.Itoa(c)] = n
	}
	for r, n := range st.rejections {
		u.Rejections[string(r)] = n
	}
	st.mu.Unlock()
	return u
}

// totals are what the series take rates of: requests answered, units
// used, rejections.
func (s *Store) totals(st *state) [3]float64 {
	var req, rej float64
	st.mu.Lock()
	for _, n := range st.codes {
		req += float64(n)
	}
	for _, n := range st.rejections {
		rej += float64(n)
	}
	st.mu.Unlock()
	units := float64(st.prompt.Load() + st.completion.Load())
	if s.o.Product.Unit == Images {
		units = float64(st.images.Load())
	}
	return [3]float64{req, units, rej}
}

// seriesKey names one series: a key id and which of the totals.
type seriesKey struct {
	id string
	m  int
}

// sample adds one sample of every key's rates since the last sample.
func (s *Store) sample(now time.Time) {
	s.mu.Lock()
	states := make([]*state, 0, len(s.states))
	for _, id := range s.order {
		states = append(states, s.states[id])
	}
	s.mu.Unlock()
	dt := now.Sub(s.last).Seconds()
	vals := make(map[seriesKey]float64, 3*len(states))
	for _, st := range states {
		t := s.totals(st)
		if p, ok := s.prev[st.id]; ok && !s.last.IsZero() && dt > 0 {
			for m := range t {
				vals[seriesKey{st.id, m}] = math.Max(0, t[m]-p[m]) / dt
			}
		}
		s.prev[st.id] = t
	}
	if !s.last.IsZero() {
		s.win.Add(now, vals)
	}
	s.last = now
}

// SeriesSnapshot is the per-key usage series: Times[i] (unix ms) is when
// Keys[id].Requests[i] etc. were sampled; a value is a rate per second
// over the interval before it, null (NaN) where unknown.
type SeriesSnapshot struct {
	Times []int64              `json:"times"`
	Keys  map[string]KeySeries `json:"keys"`
}

// KeySeries is one key's series.
type KeySeries struct {
	Requests   series.Values `json:"requests"`
	Units      series.Values `json:"units"`
	Rejections series.Values `json:"rejections"`
}

// Series is the per-key usage series taken after sinceMS (unix ms; 0 for
// all): requests/s, units/s and rejections/s per key, for the charts.
func (s *Store) Series(sinceMS int64) SeriesSnapshot {
	snap := s.win.Since(sinceMS, nil)
	out := SeriesSnapshot{Times: snap.Times, Keys: map[string]KeySeries{}}
	for k, v := range snap.Series {
		ks := out.Keys[k.id]
		switch k.m {
		case 0:
			ks.Requests = v
		case 1:
			ks.Units = v
		case 2:
			ks.Rejections = v
		}
		out.Keys[k.id] = ks
	}
	if out.Times == nil {
		out.Times = []int64{}
	}
	return out
}

// collector reads the per-key atomics at scrape time: the request path
// touches no Prometheus vector.
type collector struct{ s *Store }

func (c *collector) descs() (req, tok, img, rej, auth, infl, fail, keys *prometheus.Desc) {
	m := c.s.o.Product.Metrics
	return prometheus.NewDesc(m+"_key_requests_total", "Requests answered per key, by status code (499: the client went away).", []string{"key", "code"}, nil),
		prometheus.NewDesc(m+"_key_tokens_total", "Tokens per key: prompt, completion, cached (part of prompt), counted (prompt+completion the router counted itself, the answer carrying no usage).", []string{"key", "kind"}, nil),
		prometheus.NewDesc(m+"_key_images_total", "Input images per key.", []string{"key"}, nil),
		prometheus.NewDesc(m+"_key_rejections_total", "Requests of a key refused by its scope or limits, by reason.", []string{"key", "reason"}, nil),
		prometheus.NewDesc(m+"_auth_failures_total", "Requests refused before any key was known, by reason (missing_key, invalid_key, disabled, expired, bad_key_rate).", []string{"reason"}, nil),
		prometheus.NewDesc(m+"_key_inflight", "Requests of a key in flight now.", []string{"key"}, nil),
		prometheus.NewDesc(m+"_keys_reload_failures_total", "Key file reloads that failed (the keys in force stayed).", nil, nil),
		prometheus.NewDesc(m+"_keys", "Keys in the key file, by state.", []string{"state"}, nil)
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	req, tok, img, rej, auth, infl, fail, keys := c.descs()
	for _, d := range []*prometheus.Desc{req, tok, img, rej, auth, infl, fail, keys} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	req, tok, img, rej, auth, infl, fail, keys := c.descs()
	s := c.s
	images := s.o.Product.Unit == Images
	for _, u := range s.Usage() {
		for code, n := range u.Requests {
			ch <- prometheus.MustNewConstMetric(req, prometheus.CounterValue, float64(n), u.ID, code)
		}
		if images {
			ch <- prometheus.MustNewConstMetric(img, prometheus.CounterValue, float64(u.Images), u.ID)
		} else {
			for kind, n := range map[string]uint64{"prompt": u.PromptTokens, "completion": u.CompletionTokens, "cached": u.CachedTokens, "counted": u.CountedTokens} {
				ch <- prometheus.MustNewConstMetric(tok, prometheus.CounterValue, float64(n), u.ID, kind)
			}
		}
		for r, n := range u.Rejections {
			ch <- prometheus.MustNewConstMetric(rej, prometheus.CounterValue, float64(n), u.ID, r)
		}
		ch <- prometheus.MustNewConstMetric(infl, prometheus.GaugeValue, float64(u.InFlight), u.ID)
	}
	for i, r := range authReasons {
		ch <- prometheus.MustNewConstMetric(auth, prometheus.CounterValue, float64(s.authFailures[i].Load()), string(r))
	}
	ch <- prometheus.MustNewConstMetric(fail, prometheus.CounterValue, float64(s.reloadFailures.Load()))
	states := map[string]float64{"active": 0, "disabled": 0, "expired": 0}
	now := s.now()
	for _, k := range s.cur.Load().keys {
		states[k.state(now)]++
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(keys, prometheus.GaugeValue, n, st)
	}
}
