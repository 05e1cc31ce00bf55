package stats

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fe64bb06/frontdoor/internal/series"
	"github.com/fe64bb06/frontdoor/mentat/serve/flow"
)

// Defaults of the history behind /stats/series.json.
const (
	DefaultSampleInterval = 2 * time.Second
	DefaultHistorySpan    = 15 * time.Minute
)

// The series of one (model, group) and of each model's aggregate. Rates
// are per second over the sampling interval; latencies are the mean over
// the requests that finished in the interval (null when none did).
const (
	FieldProxied    = "proxied"        // requests the router carries now
	FieldRunning    = "running"        // engine: requests running
	FieldWaiting    = "waiting"        // engine: requests waiting
	FieldKV         = "kv"             // engine: KV cache usage 0–1
	FieldPromptTPS  = "prompt_tps"     // engine: prompt tokens/s
	FieldGenTPS     = "generation_tps" // engine: generation tokens/s
	FieldTTFT       = "ttft_s"         // engine: mean time to first token
	FieldITL        = "itl_s"          // engine: mean inter-token latency
	FieldRequestsPS = "requests_ps"    // router: answered requests/s (model only)
	Field4xxPS      = "errors_4xx_ps"  // router: 4xx answers/s, 499 included (model only)
	Field5xxPS      = "errors_5xx_ps"  // router: 5xx answers/s (model only)
	// With flow control on, requests waiting in the router (model only),
	// one series per band: queued_critical, queued_standard,
	// queued_sheddable.
	FieldQueuedPrefix = "queued_"
)

// seriesKey names one series: Group is "" for the model's aggregate.
type seriesKey struct{ Model, Group, Field string }

// History samples every routable model every interval and keeps the last
// span of samples in memory for the status page's charts.
type History struct {
	st       *Stats
	gather   prometheus.Gatherer
	interval time.Duration
	win      *series.Window[seriesKey]
	totals   *series.Counters[seriesKey]
}

// NewHistory returns a history over st's routes and engines; gather is the
// router's own registry, read for the answers by status class (nil: none).
// Zero durations take the defaults.
func (s *Stats) NewHistory(gather prometheus.Gatherer, interval, span time.Duration) *History {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	if span <= 0 {
		span = DefaultHistorySpan
	}
	return &History{st: s, gather: gather, interval: interval,
		win:    series.NewWindow[seriesKey](int(span / interval)),
		totals: series.NewCounters[seriesKey]()}
}

// Run samples until ctx ends.
func (h *History) Run(ctx context.Context) { series.Run(ctx, h.interval, h.Sample) }

// Sample takes one sample now: one scrape of every engine (shared with
// /stats.json's cache) and one read of the router's registry. Run calls
// it; calls must not overlap (the counters' bases are not locked).
func (h *History) Sample(ctx context.Context, now time.Time) {
	sctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	snap := h.st.src.Load()
	results := h.st.scrapeAll(sctx, snap)
	proxied := map[[2]string]int{}
	if h.st.inflight != nil {
		for _, q := range h.st.inflight.Requests() {
			proxied[[2]string{q.Model, q.Group}]++
		}
	}
	answers := h.answersByClass()

	h.totals.Begin(now)
	values := map[seriesKey]float64{}
	for _, model := range snap.Available() {
		var agg modelSum
		// Each replica has its own series; the model's are their sum
		// (means weighted, see modelSum).
		for _, rt := range snap.Replicas[model] {
			g := groupSample{h: h, values: values, key: seriesKey{Model: model, Group: rt.Group}}
			g.set(FieldProxied, float64(proxied[[2]string{model, rt.Group}]))
			if n, err := engineNumbers(results, model, rt); err == nil {
				g.engine(n)
			}
			agg.add(g.key, values)
		}
		agg.store(model, values)
		classes := answers[model]
		if classes == nil {
			classes = map[string]float64{FieldRequestsPS: 0, Field4xxPS: 0, Field5xxPS: 0}
		}
		for field, total := range classes {
			values[seriesKey{Model: model, Field: field}] = h.totals.Rate(seriesKey{Model: model, Field: field + "_total"}, total)
		}
		if h.st.flow != nil {
			q := h.st.flow.Queued(model)
			for b := flow.Critical; b < flow.NumBands; b++ {
				values[seriesKey{Model: model, Field: FieldQueuedPrefix + b.String()}] = float64(q[b])
			}
		}
	}
	h.totals.End()
	// The histogram increases served the aggregates; the window keeps
	// only what the route publishes.
	for k := range values {
		if isInternal(k.Field) {
			delete(values, k)
		}
	}
	h.win.Add(now, values)
}

// groupSample is one (model, group) of a sample being taken.
type groupSample struct {
	h      *History
	values map[seriesKey]float64
	key    seriesKey
}

func (g groupSample) set(field string, v float64) {
	k := g.key
	k.Field = field
	g.values[k] = v
}

func (g groupSample) setPtr(field string, v *float64) {
	if v != nil {
		g.set(field, *v)
	}
}

func (g groupSample) rate(field string, total *float64) {
	if total != nil {
		k := g.key
		k.Field = field + "_total"
		g.set(field, g.h.totals.Rate(k, *total))
	}
}

// mean stores the mean of a histogram over the interval, and keeps its
// increases for the model's aggregate.
func (g groupSample) mean(field string, tot *HistTotals) {
	if tot == nil {
		return
	}
	k := g.key
	k.Field = field + "_sum"
	dSum, _, okSum := g.h.totals.Delta(k, tot.Sum)
	k.Field = field + "_count"
	dCount, _, okCount := g.h.totals.Delta(k, tot.Count)
	if okSum && okCount {
		g.set(field, series.Ratio(dSum, dCount, true))
		g.set(field+"_dsum", dSum)
		g.set(field+"_dcount", dCount)
	}
}

func (g groupSample) engine(n Numbers) {
	g.setPtr(FieldRunning, n.Running)
	g.setPtr(FieldWaiting, n.Waiting)
	g.setPtr(FieldKV, n.KV)
	g.rate(FieldPromptTPS, n.PromptTokens)
	g.rate(FieldGenTPS, n.GenerationTokens)
	g.mean(FieldTTFT, n.TTFTTotals)
	g.mean(FieldITL, n.ITLTotals)
}

// modelSum adds a model's groups: counts and rates sum, KV usage is the
// mean, latencies are weighted by the requests each group finished.
type modelSum struct {
	sums  map[string]float64
	kv    []float64
	dsum  map[string]float64
	dcnt  map[string]float64
	fresh map[string]bool
}

var summed = []string{FieldProxied, FieldRunning, FieldWaiting, FieldPromptTPS, FieldGenTPS}

func (a *modelSum) add(g seriesKey, values map[seriesKey]float64) {
	if a.sums == nil {
		a.sums, a.dsum, a.dcnt, a.fresh = map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]bool{}
	}
	get := func(field string) (float64, bool) {
		g.Field = field
		v, ok := values[g]
		return v, ok && !math.IsNaN(v)
	}
	for _, f := range summed {
		if v, ok := get(f); ok {
			a.sums[f] += v
			a.fresh[f] = true
		}
	}
	if v, ok := get(FieldKV); ok {
		a.kv = append(a.kv, v)
	}
	for _, f := range []string{FieldTTFT, FieldITL} {
		s, ok1 := get(f + "_dsum")
		c, ok2 := get(f + "_dcount")
		if ok1 && ok2 {
			a.dsum[f] += s
			a.dcnt[f] += c
			a.fresh[f] = true
		}
	}
}

func (a *modelSum) store(model string, values map[seriesKey]float64) {
	k := seriesKey{Model: model}
	for f, v := range a.sums {
		if a.fresh[f] {
			k.Field = f
			values[k] = v
		}
	}
	if len(a.kv) > 0 {
		s := 0.0
		for _, v := range a.kv {
			s += v
		}
		k.Field = FieldKV
		values[k] = s / float64(len(a.kv))
	}
	for f := range a.dsum {
		k.Field = f
		values[k] = series.Ratio(a.dsum[f], a.dcnt[f], true)
	}
}

// answersByClass reads the router's answered requests by model: the total
// and the 4xx and 5xx classes. A model the router never answered for has
// zero of each (the registry is always readable, so absence is a count).
func (h *History) answersByClass() map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	if h.gather == nil {
		return out
	}
	fams, err := h.gather.Gather()
	if err != nil {
		return out
	}
	for _, mf := range fams {
		if mf.GetName() != "mentat_serve_requests_total" {
			continue
		}
		for _, m := range mf.Metric {
			model, code := labelOf(m, "model"), labelOf(m, "code")
			if model == "" || m.Counter == nil {
				continue
			}
			c := out[model]
			if c == nil {
				c = map[string]float64{FieldRequestsPS: 0, Field4xxPS: 0, Field5xxPS: 0}
				out[model] = c
			}
			v := m.Counter.GetValue()
			c[FieldRequestsPS] += v
			switch n, _ := strconv.Atoi(code); {
			case n >= 400 && n < 500:
				c[Field4xxPS] += v
			case n >= 500:
				c[Field5xxPS] += v
			}
		}
	}
	return out
}

func labelOf(m *dto.Metric, name string) string {
	v, _ := label(m, name)
	return v
}

// SeriesDocument is the /stats/series.json body.
type SeriesDocument struct {
	IntervalS float64       `json:"interval_s"`
	WindowS   float64       `json:"window_s"`
	T         []int64       `json:"t"`
	Models    []ModelSeries `json:"models"`
}

// ModelSeries is one model's aggregate series and each group's.
type ModelSeries struct {
	Model  string                   `json:"model"`
	Series map[string]series.Values `json:"series"`
	Groups []GroupSeries            `json:"groups"`
}

// GroupSeries is one group serving the model.
type GroupSeries struct {
	Group  string                   `json:"group"`
	Series map[string]series.Values `json:"series"`
}

// isInternal names the histogram increases a sample keeps only to weight
// the model's aggregate latencies; they are not stored.
func isInternal(field string) bool {
	n := len(field)
	return (n > 5 && field[n-5:] == "_dsum") || (n > 7 && field[n-7:] == "_dcount")
}

// Document returns the samples taken after sinceMS (unix ms; 0: all), for
// the models keep accepts (nil: all), models sorted by name.
func (h *History) Document(sinceMS int64, keep func(model string) bool) SeriesDocument {
	snap := h.win.Since(sinceMS, func(k seriesKey) bool { return keep == nil || keep(k.Model) })
	doc := SeriesDocument{IntervalS: h.interval.Seconds(), WindowS: h.interval.Seconds() * float64(h.win.Cap()),
		T: snap.Times, Models: []ModelSeries{}}
	byModel := map[string]*ModelSeries{}
	groups := map[[2]string]*GroupSeries{}
	for k, v := range snap.Series {
		m := byModel[k.Model]
		if m == nil {
			m = &ModelSeries{Model: k.Model, Series: map[string]series.Values{}, Groups: []GroupSeries{}}
			byModel[k.Model] = m
		}
		if k.Group == "" {
			m.Series[k.Field] = v
			continue
		}
		g := groups[[2]string{k.Model, k.Group}]
		if g == nil {
			g = &GroupSeries{Group: k.Group, Series: map[string]series.Values{}}
			groups[[2]string{k.Model, k.Group}] = g
		}
		g.Series[k.Field] = v
	}
	for k, g := range groups {
		byModel[k[0]].Groups = append(byModel[k[0]].Groups, *g)
	}
	for _, m := range byModel {
		sort.Slice(m.Groups, func(i, j int) bool { return m.Groups[i].Group < m.Groups[j].Group })
		doc.Models = append(doc.Models, *m)
	}
	sort.Slice(doc.Models, func(i, j int) bool { return doc.Models[i].Model < doc.Models[j].Model })
	return doc
}

// Handler serves GET /stats/series.json[?since=MS][&model=NAME...].
func (h *History) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		since, ok := seriesRequest(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		var keep func(string) bool
		if models := q["model"]; len(models) > 0 {
			want := map[string]bool{}
			for _, m := range models {
				want[m] = true
			}
			keep = func(m string) bool { return want[m] }
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(h.Document(since, keep))
	})
}

// seriesRequest checks a series route's request: GET or HEAD (else 405),
// and its ?since=MS (0 when absent; else 400). It returns false when it
// has answered.
func seriesRequest(w http.ResponseWriter, r *http.Request) (int64, bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, r.URL.Path+" answers GET only", http.StatusMethodNotAllowed)
		return 0, false
	}
	s := r.URL.Query().Get("since")
	if s == "" {
		return 0, true
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		http.Error(w, "since must be a time in Unix milliseconds, as in an earlier answer's sample times", http.StatusBadRequest)
		return 0, false
	}
	return v, true
}
