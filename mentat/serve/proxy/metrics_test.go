package proxy

import (
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// family gathers one metric family from reg.
func family(t testing.TB, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// counter returns mentat_serve_requests_total{model,code}.
func counter(t testing.TB, reg *prometheus.Registry, model, code string) float64 {
	mf := family(t, reg, "mentat_serve_requests_total")
	if mf == nil {
		return 0
	}
	for _, m := range mf.GetMetric() {
		if labelsMatch(m, map[string]string{"model": model, "code": code}) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	eng, _ := recordingEngine(t)
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, map[string]string{"down": "no running actors"})
	for _, body := range []string{`{"model":"m"}`, `{"model":"m"}`, `{"model":"nope"}`, `{"model":"down"}`, `{}`} {
		resp := rt.post(t, "/v1/chat/completions", jsonCT, body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, c := range []struct {
		model, code string
		want        float64
	}{
		{"m", "200", 2},
		{"", "404", 1}, // an unknown name never becomes a label value
		{"down", "503", 1},
		{"", "400", 1},
	} {
		if got := counter(t, rt.reg, c.model, c.code); got != c.want {
			t.Errorf("requests_total{model=%q,code=%q} = %v, want %v", c.model, c.code, got, c.want)
		}
	}
	mf := family(t, rt.reg, "mentat_serve_requests_total")
	for _, m := range mf.GetMetric() {
		if labelsMatch(m, map[string]string{"model": "nope"}) {
			t.Errorf("unknown model name leaked into labels: %v", m)
		}
	}
	h := family(t, rt.reg, "mentat_serve_upstream_first_byte_seconds")
	if h == nil || len(h.GetMetric()) != 1 || h.GetMetric()[0].GetHistogram().GetSampleCount() != 2 {
		t.Fatalf("first-byte histogram: %v", h)
	}
	g := family(t, rt.reg, "mentat_serve_inflight_requests")
	if g == nil || g.GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Fatalf("in-flight gauge after all requests ended: %v", g)
	}

	// A second proxy on the same registry shares the collectors instead
	// of panicking.
	p2 := New(rt.holder, Config{}, nil, rt.reg)
	defer p2.Close()
	if p2.m.requests != rt.p.m.requests {
		t.Fatal("second proxy did not reuse the registered collectors")
	}
	_ = http.StatusOK
}
