package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterShares(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	a := Register(reg, prometheus.NewCounterVec(opts, []string{"l"}))
	b := Register(reg, prometheus.NewCounterVec(opts, []string{"l"}))
	if a != b {
		t.Fatal("second registration did not return the first collector")
	}
	defer func() {
		if recover() == nil {
			t.Error("a clashing shape did not panic")
		}
	}()
	Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x_total", Help: "y"}, []string{"l", "m"}))
}
