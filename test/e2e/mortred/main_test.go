// Package e2e runs mortred's control plane as an operator would: the real
// mortred-server, mortred-gateway, mortred-supervisor and mortredctl
// binaries on free loopback ports with generated configuration, plus
// openssl and Nginx for the TLS edge. The browser test lives in ./browser.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stack.CloseIdle()
	testbin.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
