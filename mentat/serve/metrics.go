package serve

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics exports discovery and admission state on reg: probe
// outcomes, fresh-connection retries, and groups and daemons by state. The
// values are read at scrape time, so the hot paths only touch atomics.
func (s *Server) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(&serveCollector{s: s})
}

var (
	descProbes  = prometheus.NewDesc("mentat_serve_probes_total", "Endpoint probes of one candidate, by result.", []string{"result"}, nil)
	descRetries = prometheus.NewDesc("mentat_serve_probe_retries_total", "Probes and status polls re-sent on a fresh connection after failing on a reused one.", nil, nil)
	descGroups  = prometheus.NewDesc("mentat_serve_groups", "Known groups, by admission.", []string{"healthy"}, nil)
	descModels  = prometheus.NewDesc("mentat_serve_routable_models", "Model names that route now.", nil, nil)
	descDaemons = prometheus.NewDesc("mentat_serve_daemons", "Watched daemons, by whether the last view is fresh.", []string{"connected"}, nil)
)

type serveCollector struct{ s *Server }

func (c *serveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProbes, descRetries, descGroups, descModels, descDaemons} {
		ch <- d
	}
}

func (c *serveCollector) Collect(ch chan<- prometheus.Metric) {
	var ok, failed uint64
	c.s.mu.Lock()
	p := c.s.prober
	c.s.mu.Unlock()
	if p != nil {
		ok, failed = p.probesOK.Load(), p.probesFailed.Load()
	}
	ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(ok), "ok")
	ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(descRetries, prometheus.CounterValue, float64(c.s.ProbeRetries()))
	snap := c.s.Routes().Load()
	var healthy, unhealthy, up, down float64
	for _, g := range snap.Groups {
		if g.Healthy {
			healthy++
		} else {
			unhealthy++
		}
	}
	for _, d := range snap.Daemons {
		if d.Connected {
			up++
		} else {
			down++
		}
	}
	ch <- prometheus.MustNewConstMetric(descGroups, prometheus.GaugeValue, healthy, "true")
	ch <- prometheus.MustNewConstMetric(descGroups, prometheus.GaugeValue, unhealthy, "false")
	ch <- prometheus.MustNewConstMetric(descModels, prometheus.GaugeValue, float64(len(snap.Models)))
	ch <- prometheus.MustNewConstMetric(descDaemons, prometheus.GaugeValue, up, "true")
	ch <- prometheus.MustNewConstMetric(descDaemons, prometheus.GaugeValue, down, "false")
}
