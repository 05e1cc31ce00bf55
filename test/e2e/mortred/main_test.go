// Package e2e runs mortred's control plane as an operator would: the real
// mortred-server, mortred-gateway, mortred-supervisor and mortredctl
// binaries on free loopback ports with generated configuration, plus
// openssl and Nginx for the TLS edge. The browser test lives in ./browser.
package e2e

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

func TestMain(m *testing.M) {
	testproc.Main(m, testproc.Suite{AtEnd: []func(){stack.CloseIdle}})
}
