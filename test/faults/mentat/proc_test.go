package mentat

import (
	"os"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// cleanEnv is the test's environment without any variable the router, the
// daemon, the agent or the engine reads, plus extra: a developer's shell
// must not change what a test sees.
func cleanEnv(extra ...string) []string {
	prefixes := []string{"MENTAT_", "SERVE_", "POLL_", "PROBE_", "SERVING_", "MCP_", "TOOLS_", "ALLOWED_", "DISCOVER_", "LOG_LEVEL"}
	var out []string
next:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// start runs argv with env (testproc.Start: stopped SIGTERM then SIGKILL
// at cleanup, output logged when the test failed).
func start(t testing.TB, name string, env []string, argv ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Options{Name: name, Env: env}, argv...)
}
