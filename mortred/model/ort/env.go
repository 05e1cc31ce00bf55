// Package ort runs ONNX models on ONNX Runtime through
// github.com/yalue/onnxruntime_go: the one-time environment set-up with the
// shared library, and Session, one model loaded once with buffers it reuses
// from run to run.
package ort

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	onnx "github.com/yalue/onnxruntime_go"

	"github.com/fe64bb06/frontdoor/internal/envconf"
)

// EnvLib is the environment variable that names libonnxruntime.so.1 when the
// server config does not.
const EnvLib = "MORTRED_ORT_LIB"

// SetupHint tells an operator how to get the library and the models.
const SetupHint = "run `make setup-models` (it fetches them into .deps/) or set " + EnvLib + " to the path of libonnxruntime.so.1"

// ErrMissing marks a library or model file that does not exist; the message
// says how to get it.
var ErrMissing = errors.New("missing file")

var (
	initOnce sync.Once
	initErr  error
	initLib  string
)

// ResolveLib returns lib, or MORTRED_ORT_LIB when lib is empty, as an
// absolute path of an existing file.
func ResolveLib(lib string) (string, error) {
	if lib == "" {
		lib = envconf.OS().String(EnvLib, "")
	}
	if lib == "" {
		return "", fmt.Errorf("%w: no ONNX Runtime library configured: %s", ErrMissing, SetupHint)
	}
	abs, err := filepath.Abs(lib)
	if err != nil {
		return "", fmt.Errorf("ONNX Runtime library path %q: %v", lib, err)
	}
	st, err := os.Stat(abs)
	if err != nil || st.IsDir() {
		return "", fmt.Errorf("%w: ONNX Runtime library %s not found: %s", ErrMissing, abs, SetupHint)
	}
	return abs, nil
}

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
