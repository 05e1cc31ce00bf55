package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/internal/promreg"
)

// metrics are the router's data-path metrics. The model label carries only
// names some group is known to serve; refusals before that (400, 404, 405,
// 413) use model="" so a client cannot grow the label set.
type metrics struct {
	requests *prometheus.CounterVec
	ttfb     *prometheus.HistogramVec
	inflight *prometheus.GaugeVec

	// byModel caches each model's children: a WithLabelValues lookup
	// hashes the labels and takes the vector's lock, four times a request.
	// Readers load the map without a lock; a new model copies it.
	byModel atomic.Pointer[map[string]*modelMetrics]
	mu      sync.Mutex
}

// modelMetrics are one model's metric children, each created on first
// use (as WithLabelValues would), so no series appears before it has a
// value to show.
type modelMetrics struct {
	m        *metrics
	model    string
	inflight lazy[prometheus.Gauge]
	ttfb     lazy[prometheus.Observer]
	codes    sync.Map // int → prometheus.Counter
}

// lazy holds a metric child once made; racing makers store the same
// child, which the vector returns for the same labels.
type lazy[T any] struct{ p atomic.Pointer[T] }

func (l *lazy[T]) load() (T, bool) {
	if v := l.p.Load(); v != nil {
		return *v, true
	}
	var zero T
	return zero, false
}

func (l *lazy[T]) store(v T) T {
	l.p.Store(&v)
	return v
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mentat_serve_requests_total",
			Help: "Proxied POST requests by model and final status code (499: client closed the connection first; a stream cut after its headers counts as 502/504).",
		}, []string{"model", "code"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mentat_serve_upstream_first_byte_seconds",
			Help: "Time from sending a request upstream to the first byte of the engine's answer body (for a stream: the first frame).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
				30, 60, 120, 300, 600, 1800},
		}, []string{"model"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mentat_serve_inflight_requests",
			Help: "Requests being proxied right now, by model.",
		}, []string{"model"}),
	}
	if reg != nil {
		m.requests = promreg.Register(reg, m.requests)
		m.ttfb = promreg.Register(reg, m.ttfb)
		m.inflight = promreg.Register(reg, m.inflight)
	}
	return m
}

// model returns the children for one label value, creating them once.
// Label values are only names a group serves (or ""), so the cache is
// bounded like the vectors themselves.
func (m *metrics) model(name string) *modelMetrics {
	if mp := m.byModel.Load(); mp != nil {
		if mm := (*mp)[name]; mm != nil {
			return mm
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.byModel.Load()
	if old != nil {
		if mm := (*old)[name]; mm != nil {
			return mm
		}
	}
	mm := &modelMetrics{m: m, model: name}
	next := make(map[string]*modelMetrics, 1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[name] = mm
	m.byModel.Store(&next)
	return mm
}

func (mm *modelMetrics) gauge() prometheus.Gauge {
	if g, ok := mm.inflight.load(); ok {
		return g
	}
	return mm.inflight.store(mm.m.inflight.WithLabelValues(mm.model))
}

func (mm *modelMetrics) firstByte() prometheus.Observer {
	if o, ok := mm.ttfb.load(); ok {
		return o
	}
	return mm.ttfb.store(mm.m.ttfb.WithLabelValues(mm.model))
}

func (mm *modelMetrics) done(code int) {
	if c, ok := mm.codes.Load(code); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := mm.codes.LoadOrStore(code, mm.m.requests.WithLabelValues(mm.model, strconv.Itoa(code)))
	c.(prometheus.Counter).Inc()
}
