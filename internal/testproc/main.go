package testproc

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/internal/testbin"
)

// Suite is what Main does around a package's tests.
type Suite struct {
	// Build lists binaries (cmd/<name>) to build before any test runs, so
	// that no test's deadline pays for a build; a failed build ends the run
	// with exit status 1 and the compiler's output. Others are built on
	// first use by Bin.
	Build []string
	// AtEnd runs after the tests and before the leak check, e.g. an
	// http.Client's CloseIdleConnections, whose connections' goroutines
	// would otherwise count as leaked.
	AtEnd []func()
}

// Main is a TestMain for process-level tests: it builds s.Build, runs the
// tests, calls s.AtEnd, removes the built binaries and, if the tests
// passed, fails the run when goroutines are left over. It does not return.
func Main(m *testing.M, s Suite) {
	for _, name := range s.Build {
		if _, err := testbin.Path(name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			testbin.Cleanup()
			os.Exit(1)
		}
	}
	code := m.Run()
	for _, f := range s.AtEnd {
		f()
	}
	testbin.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Bin returns the path of the binary cmd/<name>, building it once per test
// process; a failed build fails the test.
func Bin(t testing.TB, name string) string {
	t.Helper()
	p, err := testbin.Path(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// CleanEnv is the test process's environment without any variable that
// starts with one of prefixes, plus extra: a developer's shell must not
// change what a test of a binary means.
func CleanEnv(prefixes []string, extra ...string) []string {
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
