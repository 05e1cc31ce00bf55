// Package mentat runs the router's fault cases against real processes:
// mentatd daemons and agents, enginesim engines and mentatd-serve, on
// loopback (and, for the dropped link, in network namespaces the test makes
// itself). Normal behaviour is test/e2e/mentat's; these tests kill, freeze,
// restart, cut, flood and abandon things and check what the router does.
package mentat

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// The binaries are built before the first test; testproc.Bin finds them.
func TestMain(m *testing.M) {
	testproc.Main(m, testproc.Suite{
		Build: []string{"enginesim", "mentatd", "mentatd-serve"},
		AtEnd: []func(){client.CloseIdleConnections},
	})
}
