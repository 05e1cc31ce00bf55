package h1server

import (
	"testing"

	"go.uber.org/goleak"
)

// The server runs a goroutine per connection, the fallback's Serve and
// the hang-up watch's timer: every test must leave none behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
