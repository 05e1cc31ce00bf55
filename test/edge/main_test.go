// Package edge is the black-box attack suite of the router (mentatd-serve)
// and the gateway (mortred-gateway): raw client bytes over real sockets to
// the real binaries, in front of a recording upstream that keeps every byte
// it is sent. The cases are the classic request-smuggling and
// parser-differential ones, upstreams that answer badly, and clients that
// misbehave; each asserts both what the client is answered and, byte for
// byte, what reached the engine or model server.
//
//   - upstream_test.go: the recording upstream (engine for the router,
//     model server for the gateway; it answers the router's probe).
//   - smuggle_test.go: the case table, checked against net/http itself
//     (TestReferenceStatuses) and sent to both frontends; mutate_test.go
//     the same inputs mutated.
//   - badupstream_test.go: upstreams that answer badly; client_test.go:
//     slow, idle, half-closed and too many clients; jobs_test.go: job ids
//     through the gateway.
package edge

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

func TestMain(m *testing.M) {
	testproc.Main(m, testproc.Suite{
		Build: []string{"mentatd", "mentatd-serve", "mortred-gateway"},
		AtEnd: []func(){httpClient.CloseIdleConnections},
	})
}
