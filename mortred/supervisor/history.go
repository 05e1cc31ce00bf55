package supervisor

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fe64bb06/frontdoor/internal/series"
)

// History defaults: a sample every 2 s, 15 minutes kept.
const (
	historyInterval = 2 * time.Second
	historySpan     = 15 * time.Minute
)

// The series of /api/v1/series. Rates are per second over the sampling
// interval; p50/p99 and the batch size are over the requests and batches
// of the interval (null when there were none).
const (
	fieldReq2xx    = "requests_2xx_ps" // model server: POST answers/s by class
	fieldReq4xx    = "requests_4xx_ps"
	fieldReq5xx    = "requests_5xx_ps"
	fieldP50       = "latency_p50_ms" // model server: request latency quantiles
	fieldP99       = "latency_p99_ms"
	fieldQueue     = "queue_depth" // model server: items waiting for a worker
	fieldRejected  = "rejected_ps" // model server: 429s for a full queue, per s
	fieldBatch     = "batch_size"  // model server: mean items per model run
	fieldRestarts  = "restarts"    // every child: automatic restarts so far
	fieldGwReqs    = "requests_ps" // gateway: answers/s
	fieldGwErr4xx  = "errors_4xx_ps"
	fieldGwErr5xx  = "errors_5xx_ps"
	fieldGwUpErrPS = "upstream_errors_ps" // gateway: failed upstream calls/s
)

type historyKey struct{ ID, Field string }

// history samples every child every interval: its restart count from the
// supervisor's own state and, while it runs, its /metrics (model servers
// with their token, the gateway with the metrics token). A child that is
// not running or whose scrape fails has gaps in its scraped series.
type history struct {
	m          *Manager
	interval   time.Duration
	client     *http.Client
	metricsTok string
	win        *series.Window[historyKey]
	totals     *series.Counters[historyKey]
	mu         sync.Mutex // one sample at a time (Sample is also called by tests)
}

func newHistory(m *Manager, metricsTok string) *history {
	return &history{m: m, interval: historyInterval, metricsTok: metricsTok,
		client: &http.Client{Timeout: historyInterval},
		win:    series.NewWindow[historyKey](int(historySpan / historyInterval)),
		totals: series.NewCounters[historyKey]()}
}

func (h *history) run(ctx context.Context) { series.Run(ctx, h.interval, h.sample) }

type scraped struct {
	id   string
	fams map[string]*dto.MetricFamily
}

func (h *history) sample(ctx context.Context, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	values := map[historyKey]float64{}
	var mu sync.Mutex
	var got []scraped
	var wg sync.WaitGroup
	for _, id := range h.m.order {
		x := h.m.byID[id]
		st := x.Child().Status()
		values[historyKey{id, fieldRestarts}] = float64(st.RestartCount)
		if st.PID == 0 {
			continue
		}
		url, tok := h.m.gatewayURL+"/metrics", h.metricsTok
		if x.entry == nil && tok == "" {
			continue // the gateway's /metrics needs its token; a wrong one counts as unauthorized
		}
		if x.entry != nil {
			url = "http://" + x.current().addr() + "/metrics"
			tok = h.m.modelTk
		}
		wg.Go(func() {
			fams, err := scrapeMetrics(sctx, h.client, url, tok)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, scraped{id, fams})
			mu.Unlock()
		})
	}
	wg.Wait()
	h.totals.Begin(now)
	for _, s := range got {
		if s.id == GatewayID {
			h.gateway(values, s.fams)
		} else {
			h.server(values, s.id, s.fams)
		}
	}
	h.totals.End()
	h.win.Add(now, values)
}

// rate stores the per-second increase of a total.
func (h *history) rate(values map[historyKey]float64, id, field string, total float64) {
	values[historyKey{id, field}] = h.totals.Rate(historyKey{id, field + "/total"}, total)
}

func (h *history) server(values map[historyKey]float64, id string, fams map[string]*dto.MetricFamily) {
	// Only POSTs are the data plane: GETs are probes, scrapes (this one
	// included) and job polls.
	byClass := map[string]float64{fieldReq2xx: 0, fieldReq4xx: 0, fieldReq5xx: 0}
	for _, mt := range metrics(fams, "mortred_http_requests_total") {
		if labelValue(mt, "method") != http.MethodPost {
			continue
		}
		switch code, _ := strconv.Atoi(labelValue(mt, "status")); {
		case code >= 200 && code < 300:
			byClass[fieldReq2xx] += mt.GetCounter().GetValue()
		case code >= 400 && code < 500:
			byClass[fieldReq4xx] += mt.GetCounter().GetValue()
		case code >= 500:
			byClass[fieldReq5xx] += mt.GetCounter().GetValue()
		}
	}
	posts := 0.0
	for f, v := range byClass {
		h.rate(values, id, f, v)
		if r := values[historyKey{id, f}]; !math.IsNaN(r) {
			posts += r
		}
	}
	if hist := histogram(fams, "mortred_http_request_duration_ms"); hist != nil {
		if buckets, ok := h.bucketDeltas(id, "latency", hist); ok && posts > 0 {
			values[historyKey{id, fieldP50}] = series.Quantile(0.5, buckets)
			values[historyKey{id, fieldP99}] = series.Quantile(0.99, buckets)
		}
	}
	if ms := metrics(fams, "mortred_queue_depth"); len(ms) > 0 {
		values[historyKey{id, fieldQueue}] = sum(ms)
	}
	if ms := metrics(fams, "mortred_queue_rejected_total"); len(ms) > 0 {
		h.rate(values, id, fieldRejected, sum(ms))
	}
	if hist := histogram(fams, "mortred_batch_size"); hist != nil {
		dSum, _, ok1 := h.totals.Delta(historyKey{id, "batch/sum"}, hist.GetSampleSum())
		dCount, _, ok2 := h.totals.Delta(historyKey{id, "batch/count"}, float64(hist.GetSampleCount()))
		values[historyKey{id, fieldBatch}] = series.Ratio(dSum, dCount, ok1 && ok2)
	}
}

func (h *history) gateway(values map[historyKey]float64, fams map[string]*dto.MetricFamily) {
	var all, c4, c5 float64
	for _, mt := range metrics(fams, "mortred_gateway_requests_total") {
		v := mt.GetCounter().GetValue()
		all += v
		switch code, _ := strconv.Atoi(labelValue(mt, "status")); {
		case code >= 400 && code < 500:
			c4 += v
		case code >= 500:
			c5 += v
		}
	}
	h.rate(values, GatewayID, fieldGwReqs, all)
	h.rate(values, GatewayID, fieldGwErr4xx, c4)
	h.rate(values, GatewayID, fieldGwErr5xx, c5)
	h.rate(values, GatewayID, fieldGwUpErrPS, sum(metrics(fams, "mortred_gateway_upstream_errors_total")))
}

// bucketDeltas turns a histogram's cumulative buckets into the counts of
// this interval; ok is false when any bucket has no base.
func (h *history) bucketDeltas(id, name string, hist *dto.Histogram) ([]series.Bucket, bool) {
	out := make([]series.Bucket, 0, len(hist.Bucket)+1)
	ok := true
	add := func(le, cum float64) {
		d, _, good := h.totals.Delta(historyKey{id, name + "/le=" + strconv.FormatFloat(le, 'g', -1, 64)}, cum)
		ok = ok && good
		out = append(out, series.Bucket{UpperBound: le, Count: d})
	}
	for _, b := range hist.Bucket {
		if !math.IsInf(b.GetUpperBound(), 1) {
			add(b.GetUpperBound(), float64(b.GetCumulativeCount()))
		}
	}
	add(math.Inf(1), float64(hist.GetSampleCount()))
	return out, ok
}

func metrics(fams map[string]*dto.MetricFamily, name string) []*dto.Metric {
	if mf := fams[name]; mf != nil {
		return mf.Metric
	}
	return nil
}

func histogram(fams map[string]*dto.MetricFamily, name string) *dto.Histogram {
	ms := metrics(fams, name)
	if len(ms) == 0 || ms[0].Histogram == nil {
		return nil
	}
	return ms[0].Histogram
}

func sum(ms []*dto.Metric) float64 {
	s := 0.0
	for _, mt := range ms {
		switch {
		case mt.Counter != nil:
			s += mt.Counter.GetValue()
		case mt.Gauge != nil:
			s += mt.Gauge.GetValue()
		case mt.Untyped != nil:
			s += mt.Untyped.GetValue()
		}
	}
	return s
}

func labelValue(mt *dto.Metric, name string) string {
	for _, l := range mt.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// SeriesDocument is the /api/v1/series body.
type SeriesDocument struct {
	IntervalS float64       `json:"interval_s"`
	WindowS   float64       `json:"window_s"`
	T         []int64       `json:"t"`
	Gateway   ChildSeries   `json:"gateway"`
	Servers   []ChildSeries `json:"servers"`
}

// ChildSeries is one supervised process's series.
type ChildSeries struct {
	ID     string                   `json:"id"`
	Series map[string]series.Values `json:"series"`
}

// document is the samples after sinceMS (0: all) of the children keep
// accepts (nil: all); the gateway and every server are listed, those left
// out with no series.
func (h *history) document(sinceMS int64, keep func(id string) bool) SeriesDocument {
	var keepKey func(historyKey) bool
	if keep != nil {
		keepKey = func(k historyKey) bool { return keep(k.ID) }
	}
	snap := h.win.Since(sinceMS, keepKey)
	doc := SeriesDocument{IntervalS: h.interval.Seconds(), WindowS: h.interval.Seconds() * float64(h.win.Cap()), T: snap.Times,
		Gateway: ChildSeries{ID: GatewayID, Series: map[string]series.Values{}}, Servers: []ChildSeries{}}
	byID := map[string]map[string]series.Values{GatewayID: doc.Gateway.Series}
	for _, x := range h.m.Servers() {
		byID[x.ID] = map[string]series.Values{}
		doc.Servers = append(doc.Servers, ChildSeries{ID: x.ID, Series: byID[x.ID]})
	}
	for k, v := range snap.Series {
		if s := byID[k.ID]; s != nil {
			s[k.Field] = v
		}
	}
	sort.Slice(doc.Servers, func(i, j int) bool { return doc.Servers[i].ID < doc.Servers[j].ID })
	return doc
}

func (m *Manager) series(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var keep func(string) bool
	if ids := q["id"]; len(ids) > 0 {
		want := map[string]bool{}
		for _, id := range ids {
			if m.byID[id] == nil {
				writeJSON(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no server %q; GET /api/v1/catalog lists them", id)})
				return
			}
			want[id] = true
		}
		keep = func(id string) bool { return want[id] }
	}
	var since int64
	if s := q.Get("since"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			writeJSON(w, http.StatusBadRequest, apiError{Error: "since must be a time in Unix milliseconds, as in the t array of an earlier answer"})
			return
		}
		since = v
	}
	writeJSON(w, http.StatusOK, m.hist.document(since, keep))
}
