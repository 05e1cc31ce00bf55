// Package ort runs ONNX models on ONNX Runtime through
// github.com/yalue/onnxruntime_go: the one-time environment set-up with the
// shared library, and Session, one model loaded once with buffers it reuses
// from run to run.
package ort

import (
	"errors"
	"fmt"
	"sync"

	onnx "github.com/yalue/onnxruntime_go"

	"github.com/fe64bb06/frontdoor/mortred/deps"
)

// SetupHint tells an operator how to get the library and the models.
const SetupHint = "run `make setup` in the checkout (it installs them into .deps/), or set " + deps.EnvLib + " to the path of libonnxruntime.so.1"

// ErrMissing marks a library or model file that does not exist; the message
// says how to get it.
var ErrMissing = errors.New("missing file")

var (
	initOnce sync.Once
	initErr  error
	initLib  string
)

// ResolveLib returns the absolute path of libonnxruntime.so.1: lib (a
// server's ort_lib_path) or MORTRED_ORT_LIB when given, else what `make
// setup` installed, found by the search order of package deps.
func ResolveLib(lib string) (string, error) {
	abs, err := deps.Default().Lib(lib)
	return abs, Missing(err)
}

// Missing marks a deps.NotFoundError as ErrMissing for errors.Is, keeping
// its message; any other error is returned as is.
func Missing(err error) error {
	if nf, ok := err.(*deps.NotFoundError); ok {
		return missing{nf}
	}
	return err
}

type missing struct{ *deps.NotFoundError }

func (missing) Is(target error) bool { return target == ErrMissing }
func (m missing) Unwrap() error      { return m.NotFoundError }

// Init loads the ONNX Runtime shared library and creates the process-wide
// environment. The binding can initialise only once per process, so the first
// successful path wins: later calls with the same path are no-ops and calls
// with another path fail. An empty lib means MORTRED_ORT_LIB.
func Init(lib string) error {
	abs, err := ResolveLib(lib)
	if err != nil {
		return err
	}
	initOnce.Do(func() {
		initLib = abs
		onnx.SetSharedLibraryPath(abs)
		if err := onnx.InitializeEnvironment(); err != nil {
			initErr = fmt.Errorf("loading ONNX Runtime from %s: %v (is it the linux x64 libonnxruntime.so.1 of onnxruntime-node 1.30? %s)", abs, err, SetupHint)
		}
	})
	if initErr != nil {
		return initErr
	}
	if abs != initLib {
		return fmt.Errorf("ONNX Runtime is already loaded from %s in this process; cannot switch to %s", initLib, abs)
	}
	return nil
}

// Version is the loaded library's version, or "" before Init.
func Version() string {
	if !onnx.IsInitialized() {
		return ""
	}
	return onnx.GetVersion()
}
