package testnet

import (
	"errors"
	"fmt"
	"sync"
)

// Adapter lets code outside a test (a benchmark, the soak) use the
// package. Fatal and Skip end the function that Do runs (by a panic that
// Do recovers into an error: a *SkipError for Skip), as they end a test;
// cleanups registered with Cleanup run, last first, when Close is called,
// and Errorf collects what they report.
type Adapter struct {
	mu       sync.Mutex
	cleanups []func()
	errs     []error
}

var _ T = (*Adapter)(nil)

// fatal and skipped are the panics of Fatal and Skip.
type (
	fatal   struct{ err error }
	skipped struct{ msg string }
)

// SkipError is a Skip: what testnet could not do and why.
type SkipError struct{ Msg string }

func (e *SkipError) Error() string { return e.Msg }

func (l *Adapter) Helper()                          {}
func (l *Adapter) Fatal(args ...any)                { panic(fatal{errors.New(fmt.Sprint(args...))}) }
func (l *Adapter) Skip(args ...any)                 { panic(skipped{fmt.Sprint(args...)}) }
func (l *Adapter) Skipf(format string, args ...any) { panic(skipped{fmt.Sprintf(format, args...)}) }

func (l *Adapter) Errorf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Errorf(format, args...))
}

func (l *Adapter) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

// Do runs f and returns its Fatal as an error, its Skip as a *SkipError;
// any other panic goes on.
func (l *Adapter) Do(f func()) (err error) {
	defer func() {
		switch r := recover().(type) {
		case nil:
		case fatal:
			err = r.err
		case skipped:
			err = &SkipError{r.msg}
		default:
			panic(r)
		}
	}()
	f()
	return nil
}

// Close runs the cleanups, last registered first, each once (a Fatal in
// one does not stop the others), and returns everything they reported.
func (l *Adapter) Close() error {
	l.mu.Lock()
	fs := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		if err := l.Do(fs[i]); err != nil {
			l.Errorf("%v", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := errors.Join(l.errs...)
	l.errs = nil
	return err
}
