package mentat

import (
	"testing"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// cleanEnv is the test's environment without any variable the router, the
// daemon, the agent or the engine reads, plus extra: a developer's shell
// must not change what a test sees.
func cleanEnv(extra ...string) []string {
	return testproc.CleanEnv([]string{"MENTAT_", "SERVE_", "POLL_", "PROBE_", "SERVING_", "MCP_", "TOOLS_", "ALLOWED_", "DISCOVER_", "LOG_LEVEL"}, extra...)
}

// start runs argv with env (testproc.Start: stopped SIGTERM then SIGKILL
// at cleanup, output logged when the test failed).
func start(t testing.TB, name string, env []string, argv ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Options{Name: name, Env: env}, argv...)
}
