package enginesim

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Finish reasons as vLLM labels request_success_total.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

// stats are the engine's counters: one source for /metrics and for the
// engine_status tool.
type stats struct {
	requests         atomic.Int64 // generation requests that reached the scheduler
	injectedFailures atomic.Int64
	queueFull        atomic.Int64
	promptTokens     atomic.Int64
	generationTokens atomic.Int64
	preemptions      atomic.Int64
	finishedStop     atomic.Int64
	finishedLength   atomic.Int64
	finishedAbort    atomic.Int64
}

func (s *stats) finished(reason string) {
	switch reason {
	case finishStop:
		s.finishedStop.Add(1)
	case finishLength:
		s.finishedLength.Add(1)
	default:
		s.finishedAbort.Add(1)
	}
}

// Bucket bounds as vLLM's (v0.10+) prometheus logger sets them.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics is the /metrics side: histograms observed on the hot path, and a
// collector that reads the counters and the scheduler at scrape time.
type metrics struct {
	reg           *prometheus.Registry
	ttft          prometheus.Histogram
	itl           prometheus.Histogram
	queueTime     prometheus.Histogram
	prefillTime   prometheus.Histogram
	decodeTime    prometheus.Histogram
	inferenceTime prometheus.Histogram
	e2eLatency    prometheus.Histogram
}

func newMetrics(modelName string, st *stats, sched *scheduler) *metrics {
	labels := prometheus.Labels{"model_name": modelName, "engine": "0"}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	m := &metrics{
		reg:           prometheus.NewRegistry(),
		ttft:          hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:           hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		queueTime:     hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets),
		prefillTime:   hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestLatencyBuckets),
		decodeTime:    hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestLatencyBuckets),
		inferenceTime: hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestLatencyBuckets),
		e2eLatency:    hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestLatencyBuckets),
	}
	m.reg.MustRegister(m.ttft, m.itl, m.queueTime, m.prefillTime, m.decodeTime, m.inferenceTime, m.e2eLatency, newEngineCollector(labels, st, sched),
		// vLLM exports its runtime's (python_gc_*, process_*); this is Go's.
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// engineCollector turns counters and scheduler state into vLLM's series.
type engineCollector struct {
	st    *stats
	sched *scheduler

	running, waiting, kv, prompt, generation, preemptions, success, queries, hits *prometheus.Desc
}

func newEngineCollector(l prometheus.Labels, st *stats, sched *scheduler) *engineCollector {
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, l)
	}
	return &engineCollector{
		st: st, sched: sched,
		running:     d("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:     d("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kv:          d("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		prompt:      d("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generation:  d("vllm:generation_tokens_total", "Number of generation tokens processed."),
		preemptions: d("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		success:     d("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason"),
		queries:     d("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		hits:        d("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.kv, c.prompt, c.generation, c.preemptions, c.success, c.queries, c.hits} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.sched.state()
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(s.Running))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting))
	ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, s.Usage)
	ch <- prometheus.MustNewConstMetric(c.queries, prometheus.CounterValue, float64(s.Queries))
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(c.prompt, prometheus.CounterValue, float64(c.st.promptTokens.Load()))
	ch <- prometheus.MustNewConstMetric(c.generation, prometheus.CounterValue, float64(c.st.generationTokens.Load()))
	ch <- prometheus.MustNewConstMetric(c.preemptions, prometheus.CounterValue, float64(c.st.preemptions.Load()))
	ch <- prometheus.MustNewConstMetric(c.success, prometheus.CounterValue, float64(c.st.finishedStop.Load()), finishStop)
	ch <- prometheus.MustNewConstMetric(c.success, prometheus.CounterValue, float64(c.st.finishedLength.Load()), finishLength)
	ch <- prometheus.MustNewConstMetric(c.success, prometheus.CounterValue, float64(c.st.finishedAbort.Load()), finishAbort)
}

var _ prometheus.Collector = (*engineCollector)(nil)
