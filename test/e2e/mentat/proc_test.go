package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/internal/testproc"
)

// baseEnv is what every process gets: enough to run, and nothing of the
// caller's MENTAT_* or router settings, so a developer's shell cannot change
// what a test means.
func baseEnv(extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "LOG_LEVEL=debug"}
	return append(env, extra...)
}

// start runs argv with env (testproc.Start); a process that needs more than
// SIGTERM to stop at cleanup fails the test.
func start(t *testing.T, name string, env []string, argv ...string) *testproc.Proc {
	t.Helper()
	return testproc.Start(t, testproc.Options{Name: name, Env: env, MustStop: true}, argv...)
}

// stop stops p now, as its cleanup would.
func stop(t *testing.T, p *testproc.Proc) {
	t.Helper()
	if p.Stop(testproc.DefaultGrace) {
		t.Errorf("%s did not stop within %v of SIGTERM; killed its process group", p.Name(), testproc.DefaultGrace)
	}
}

// deadline is generous: two cores are shared with other engineers'
// compiles and tests.
const deadline = 45 * time.Second

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testproc.Until(t, deadline, what, cond)
}
