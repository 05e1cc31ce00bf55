// Package mentat runs the router's fault cases against real processes:
// mentatd daemons and agents, enginesim engines and mentatd-serve, on
// loopback (and, for the dropped link, in network namespaces the test makes
// itself). Normal behaviour is test/e2e/mentat's; these tests kill, freeze,
// restart, cut, flood and abandon things and check what the router does.
package mentat

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/testbin"
)

// The binaries, built once in TestMain.
var binEngine, binMentatd, binServe string

func TestMain(m *testing.M) {
	var err error
	for _, b := range []struct {
		dst  *string
		name string
	}{{&binEngine, "enginesim"}, {&binMentatd, "mentatd"}, {&binServe, "mentatd-serve"}} {
		if *b.dst, err = testbin.Path(b.name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			testbin.Cleanup()
			os.Exit(1)
		}
	}
	code := m.Run()
	client.CloseIdleConnections()
	testbin.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
