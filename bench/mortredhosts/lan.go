package mortredhosts

import (
	"errors"
	"fmt"
	"sync"

	"github.com/fe64bb06/frontdoor/internal/testnet"
)

// lanT lets the benchmark use internal/testnet outside a test. Fatal
// and Skip end the function that do runs (by a panic that do recovers
// into an error: a *skipError for Skip), as they end a test; cleanups
// registered with Cleanup run, last first, when close is called, at the
// end of the part that made the LAN, and Errorf collects what they report.
type lanT struct {
	mu       sync.Mutex
	cleanups []func()
	errs     []error
}

var _ testnet.T = (*lanT)(nil)

// fatal and skipped are the panics of Fatal and Skip.
type (
	fatal   struct{ err error }
	skipped struct{ msg string }
)

// skipError is a Skip: what testnet could not do and why.
type skipError struct{ msg string }

func (e *skipError) Error() string { return e.msg }

func (l *lanT) Helper()                          {}
func (l *lanT) Fatal(args ...any)                { panic(fatal{errors.New(fmt.Sprint(args...))}) }
func (l *lanT) Skip(args ...any)                 { panic(skipped{fmt.Sprint(args...)}) }
func (l *lanT) Skipf(format string, args ...any) { panic(skipped{fmt.Sprintf(format, args...)}) }

func (l *lanT) Errorf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Errorf(format, args...))
}

func (l *lanT) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

// do runs f and returns its Fatal as an error, its Skip as a *skipError;
// any other panic goes on.
func (l *lanT) do(f func()) (err error) {
	defer func() {
		switch r := recover().(type) {
		case nil:
		case fatal:
			err = r.err
		case skipped:
			err = &skipError{r.msg}
		default:
			panic(r)
		}
	}()
	f()
	return nil
}

// close runs the cleanups, last registered first, each once (a Fatal in
// one does not stop the others), and returns everything they reported.
func (l *lanT) close() error {
	l.mu.Lock()
	fs := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		if err := l.do(fs[i]); err != nil {
			l.Errorf("%v", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := errors.Join(l.errs...)
	l.errs = nil
	return err
}
