package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	clientClosed   *prometheus.CounterVec
	unauthorized   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mortred_gateway_requests_total", Help: "Requests answered, by catalog id and HTTP status.",
		}, []string{"model", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mortred_gateway_request_duration_seconds", Help: "Time from request to the end of the upstream answer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"model"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mortred_gateway_upstream_errors_total", Help: "Upstream failures: refused (503), transport (502), mid_response.",
		}, []string{"model", "kind"}),
		clientClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mortred_gateway_client_closed_total", Help: "Requests whose client hung up before the answer ended (not upstream errors).",
		}, []string{"model"}),
		unauthorized: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mortred_gateway_unauthorized_total", Help: "Requests refused for a missing or wrong Bearer token.",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.upstreamErrors, m.clientClosed, m.unauthorized)
	return m
}

func (m *metrics) request(model string, status int) {
	m.requests.WithLabelValues(model, strconv.Itoa(status)).Inc()
}
