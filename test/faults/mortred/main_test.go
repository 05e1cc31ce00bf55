// Package mortred runs mortred's fault cases against the real binaries: a
// supervisor with its gateway and model servers on free loopback ports
// (test/e2e/mortred/stack builds the configuration and runs them). Normal
// behaviour is test/e2e/mortred's; these tests kill model servers, overload
// queues, hold connections open, send hostile bodies and restart the
// gateway under a running job.
package mortred

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/testbin"
	"github.com/fe64bb06/frontdoor/test/e2e/mortred/stack"
)

func TestMain(m *testing.M) {
	for _, name := range []string{"mortred-server", "mortred-gateway", "mortred-supervisor"} {
		if _, err := testbin.Path(name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			testbin.Cleanup()
			os.Exit(1)
		}
	}
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
