package proxy

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's data-path metrics. The model label carries only
// names some group is known to serve; refusals before that (400, 404, 405,
// 413) use model="" so a client cannot grow the label set.
type metrics struct {
	requests *prometheus.CounterVec
	ttfb     *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
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
		m.requests = register(reg, m.requests)
		m.ttfb = register(reg, m.ttfb)
		m.inflight = register(reg, m.inflight)
	}
	return m
}

// register registers c, or returns the collector already registered under
// the same description (a second Proxy on one registry shares it).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

func (m *metrics) done(model string, code int) {
	m.requests.WithLabelValues(model, strconv.Itoa(code)).Inc()
}
