package balance

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fe64bb06/frontdoor/internal/promreg"
)

// metrics are the routing metrics. Label values are admitted model and
// group names only, so the series are bounded like the cluster.
type metrics struct {
	// counted caches the decision counters by decisionKey, for the hot
	// path and for Decisions.
	counted   sync.Map
	decisions *prometheus.CounterVec
	refusals  *prometheus.CounterVec
	blocks    *prometheus.CounterVec
	indexSize *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mentat_serve_routing_decisions_total",
			Help: "Requests sent to a replica, by model, replica (group) and reason: affinity (prefix or session), load, fallback (the preferred replica was over the threshold), refused (an earlier replica refused the connection), order (first, round-robin), home (a prompt new to the router went to its rendezvous replica).",
		}, []string{"model", "replica", "reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mentat_serve_routing_refusals_total",
			Help: "Connections a replica refused before anything was sent (the request went to the next replica), by model and replica.",
		}, []string{"model", "replica"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mentat_serve_prefix_blocks_total",
			Help: "Prompt blocks routed under the prefix policy, by model and result: hit (the chosen replica had been sent that leading block before) or miss. hit / (hit + miss) is the prefix hit ratio.",
		}, []string{"model", "result"}),
		indexSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mentat_serve_prefix_index_blocks",
			Help: "Blocks held in the model's prefix index (bounded; least recently used dropped first).",
		}, []string{"model"}),
	}
	if reg != nil {
		m.decisions = promreg.Register(reg, m.decisions)
		m.refusals = promreg.Register(reg, m.refusals)
		m.blocks = promreg.Register(reg, m.blocks)
		m.indexSize = promreg.Register(reg, m.indexSize)
	}
	return m
}

type decisionKey struct {
	model, replica string
	reason         Reason
}

func (m *metrics) decision(model, replica string, r Reason) {
	k := decisionKey{model, replica, r}
	c, ok := m.counted.Load(k)
	if !ok {
		c, _ = m.counted.LoadOrStore(k, m.decisions.WithLabelValues(model, replica, string(r)))
	}
	c.(prometheus.Counter).Inc()
}

// counts returns the decisions for model on replica by reason.
func (m *metrics) counts(model, replica string) map[string]float64 {
	out := map[string]float64{}
	m.counted.Range(func(k, v any) bool {
		if dk := k.(decisionKey); dk.model == model && dk.replica == replica {
			var d dto.Metric
			if v.(prometheus.Counter).Write(&d) == nil {
				out[string(dk.reason)] = d.GetCounter().GetValue()
			}
		}
		return true
	})
	return out
}

func (m *metrics) refusal(model, replica string) {
	m.refusals.WithLabelValues(model, replica).Inc()
}

func (m *metrics) prefix(model string, hit, total, size int) {
	m.blocks.WithLabelValues(model, "hit").Add(float64(hit))
	m.blocks.WithLabelValues(model, "miss").Add(float64(total - hit))
	m.indexSize.WithLabelValues(model).Set(float64(size))
}
