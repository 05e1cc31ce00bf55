package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// metrics are the model server's Prometheus series (names from the notes).
// Each Server has its own registry so tests can run many servers.
type metrics struct {
	up, ready       prometheus.Gauge
	requests        *prometheus.CounterVec
	requestMS       prometheus.Histogram
	inferenceMS     prometheus.Histogram
	prepareMS       prometheus.Histogram
	queueWaitMS     prometheus.Histogram
	queueDepth      prometheus.Gauge
	queueRejected   *prometheus.CounterVec
	workersBusy     prometheus.Gauge
	batchSize       prometheus.Histogram
	batchWindowMS   prometheus.Histogram
	asyncJobs       *prometheus.CounterVec
	asyncQueueDepth prometheus.Gauge
	model           string
}

var msBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

func newMetrics(reg prometheus.Registerer, modelID string) *metrics {
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &metrics{model: modelID}
	m.up = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mortred_up", Help: "1 while the process runs."})
	m.ready = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mortred_ready", Help: "1 once the model is loaded and warm."})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mortred_http_requests_total", Help: "HTTP answers by model, method and HTTP status."}, []string{"model", "method", "status"})
	m.requestMS = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mortred_http_request_duration_ms", Help: "Time from arrival to answer, ms.", Buckets: msBuckets})
	m.inferenceMS = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mortred_inference_duration_ms", Help: "Model run time per batch, ms.", Buckets: msBuckets})
	m.prepareMS = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mortred_prepare_duration_ms", Help: "Image decoding and pre-processing time per batch, on the worker, ms.", Buckets: msBuckets})
	m.queueWaitMS = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mortred_queue_wait_duration_ms", Help: "Time an item waited for a worker, ms.", Buckets: msBuckets})
	m.queueDepth = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mortred_queue_depth", Help: "Items waiting for a worker."})
	m.queueRejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mortred_queue_rejected_total", Help: "Requests refused with 429 because a queue was full, by queue."}, []string{"queue"})
	m.workersBusy = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mortred_workers_busy", Help: "Workers preparing or running a batch."})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mortred_batch_size", Help: "Items per model run.", Buckets: []float64{1, 2, 4, 8, 16, 32}})
	m.batchWindowMS = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mortred_batch_window_wait_ms", Help: "Time a worker waited to fill a batch, ms.", Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 25, 50, 100, 250}})
	m.asyncJobs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mortred_async_jobs_total", Help: "Async jobs by state reached (pending = accepted)."}, []string{"state"})
	m.asyncQueueDepth = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mortred_async_queue_depth", Help: "Async jobs not yet finished."})
	for _, c := range []prometheus.Collector{m.up, m.ready, m.requests, m.requestMS, m.inferenceMS, m.prepareMS, m.queueWaitMS, m.queueDepth,
		m.queueRejected, m.workersBusy, m.batchSize, m.batchWindowMS, m.asyncJobs, m.asyncQueueDepth} {
		f(c)
	}
	m.queueRejected.WithLabelValues("model")
	m.queueRejected.WithLabelValues("async")
	for _, st := range envelope.JobStates {
		m.asyncJobs.WithLabelValues(st)
	}
	m.up.Set(1)
	return m
}

func (m *metrics) request(method string, code int, ms float64) {
	m.requests.WithLabelValues(m.model, method, strconv.Itoa(code)).Inc()
	m.requestMS.Observe(ms)
}
