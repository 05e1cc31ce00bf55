package gateway

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	clientClosed   *prometheus.CounterVec
	unauthorized   prometheus.Counter
	routesReloads  *prometheus.CounterVec
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
		routesReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mortred_gateway_routes_reloads_total", Help: "Reloads of the routes file (SIGHUP), by result: ok, or error (the routes in force stay).",
		}, []string{"result"}),
	}
	m.routesReloads.WithLabelValues("ok")
	m.routesReloads.WithLabelValues("error")
	reg.MustRegister(m.requests, m.duration, m.upstreamErrors, m.clientClosed, m.unauthorized, m.routesReloads)
	return m
}

func (m *metrics) request(model string, status int) {
	m.requests.WithLabelValues(model, strconv.Itoa(status)).Inc()
}

// upstreamState is one model's per-request constants: its Authorization
// value and its metric children, found once instead of by a label lookup
// (hash and lock) on every request; and its route, which a routes file
// reload replaces.
type upstreamState struct {
	auth []string // nil when the model takes no token
	// modelHeader is the X-Mortred-Model value of its answers (shared:
	// net/http only reads header values).
	modelHeader []string
	duration    atomic.Pointer[prometheus.Observer]
	m           *metrics
	id          string
	codes       sync.Map // int → prometheus.Counter
	// route is where the model's requests go now: its catalog address, or
	// the instances of the routes file. A request loads it once.
	route atomic.Pointer[route]
}

func newUpstreamState(u *Upstream, m *metrics) *upstreamState {
	st := &upstreamState{m: m, id: u.ID, modelHeader: []string{u.ID}}
	st.route.Store(catalogRoute(u))
	if u.Token != "" {
		st.auth = []string{"Bearer " + u.Token}
	}
	// Created when first observed, as WithLabelValues would: a model
	// nobody called shows no series.
	return st
}

func (st *upstreamState) request(status int) {
	if c, ok := st.codes.Load(status); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := st.codes.LoadOrStore(status, st.m.requests.WithLabelValues(st.id, strconv.Itoa(status)))
	c.(prometheus.Counter).Inc()
}

func (st *upstreamState) observe(seconds float64) {
	o := st.duration.Load()
	if o == nil {
		// Racing first requests store the same child.
		d := st.m.duration.WithLabelValues(st.id)
		o = &d
		st.duration.Store(o)
	}
	(*o).Observe(seconds)
}
