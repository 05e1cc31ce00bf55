// Package promreg registers Prometheus collectors so that a second
// component on one registry shares the first one's collector instead of
// failing: two proxies or balancers in one test process, or one rebuilt.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg, or returns the collector already
// registered under the same description. It panics on any other error
// (a name clash of different shapes is a programming error).
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
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
