package flow

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Prometheus series. Tenants are labelled by
// Request.Label (a key id, or "-"), never by a name a client chose.
type metrics struct {
	wait     *prometheus.HistogramVec
	letGo    *prometheus.CounterVec
	refusals *prometheus.CounterVec
}

func newMetrics(c *Controller, reg prometheus.Registerer) *metrics {
	m := &metrics{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mentat_serve_flow_wait_seconds",
			Help:    "Time requests waited in the router's flow-control queue before they went (0: they did not wait).",
			Buckets: []float64{0, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"model", "band"}),
		letGo: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mentat_serve_flow_dispatched_total",
			Help: "Requests flow control let go, by tenant (key id, or - without keys) and band."}, []string{"tenant", "band"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mentat_serve_flow_refused_total",
			Help: "Requests flow control did not let go, by tenant and reason: queue_full, queue_timeout, shed, client_gone."}, []string{"tenant", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.wait, m.letGo, m.refusals, &queued{c: c})
	}
	return m
}

func (m *metrics) dispatched(r Request, waited time.Duration) {
	m.wait.WithLabelValues(r.Model, r.Band.String()).Observe(waited.Seconds())
	m.letGo.WithLabelValues(r.Label, r.Band.String()).Inc()
}

func (m *metrics) refused(r Request, reason string) {
	m.refusals.WithLabelValues(r.Label, reason).Inc()
}

// queued reports the waiting requests per model and band at scrape time.
type queued struct{ c *Controller }

var queuedDesc = prometheus.NewDesc("mentat_serve_flow_queued", "Requests waiting in the router's flow-control queue, by model and band.", []string{"model", "band"}, nil)

func (q *queued) Describe(ch chan<- *prometheus.Desc) { ch <- queuedDesc }

func (q *queued) Collect(ch chan<- prometheus.Metric) {
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	for name, mq := range q.c.models {
		for b := range mq.bands {
			ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(mq.bands[b].queued), name, Band(b).String())
		}
	}
}
