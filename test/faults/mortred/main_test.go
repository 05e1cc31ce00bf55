// Package mortred runs mortred's fault cases against the real binaries: a
// supervisor with its gateway and model servers on free loopback ports
// (test/e2e/mortred/stack builds the configuration and runs them). Normal
// behaviour is test/e2e/mortred's; these tests kill model servers, overload
// queues, hold connections open, send hostile bodies and restart the
// gateway under a running job.
package mortred

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

func TestMain(m *testing.M) {
	testproc.Main(m, testproc.Suite{
		Build: []string{"mortred-server", "mortred-gateway", "mortred-supervisor"},
		AtEnd: []func(){stack.CloseIdle},
	})
}
