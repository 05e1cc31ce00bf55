// Package e2e runs a mentat cluster for real: the mentatd, mentatd-serve and
// enginesim binaries (built once by internal/testbin) as separate processes
// on loopback, with fast intervals, and checks what an operator would see
// on the router. Tests that need several addresses on one node build them
// with network namespaces and veth pairs (netns_test.go).
package e2e

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func TestMain(m *testing.M) { testproc.Main(m, testproc.Suite{}) }
