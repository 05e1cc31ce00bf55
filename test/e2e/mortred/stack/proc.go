// Package stack runs mortred's real binaries for process-level tests: temp
// configuration directories with free loopback ports, the supervisor
// started and stopped as an operator would, and the HTTP helpers the
// requests need. It is shared by the e2e packages under test/e2e/mortred
// and by test/faults/mortred; the process lifecycle itself is
// internal/testproc's.
package stack

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// BaseEnv is the test process's environment without any MORTRED* variable,
// so a developer's shell cannot change what a test sees.
func BaseEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MORTRED") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// stopGrace is what a mortred process gets after SIGTERM at cleanup: the
// supervisor stops its children first.
const stopGrace = 15 * time.Second

// Start runs bin with args and the whole environment env (testproc.Start);
// at cleanup it gets SIGTERM, then SIGKILL after 15 s.
func Start(t testing.TB, bin string, args, env []string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Options{Env: env, Grace: stopGrace}, append([]string{bin}, args...)...)
}
