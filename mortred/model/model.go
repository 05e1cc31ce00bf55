// Package model is the seam between mortred's server and a model: the Model
// interface every backend implements, the per-item error type, and a
// registry of model types by name.
//
// Data flow per request: the server queues the request's images; a worker
// takes a batch of them, calls Prepare once per image and then Run on the
// prepared ones. A worker owns one Model instance (worker_nums instances per
// process); Run is never called concurrently on one instance. Info,
// ValidateParams and Prepare may be called at any time from many goroutines
// (also while Run is running), so they must only read state fixed at
// construction.
package model

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
)

// Info describes a loaded model.
type Info struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Task is the payload kind: classification, text_detection,
	// text_recognition or ocr.
	Task string `json:"task"`
}

// Input is one prepared item; only the Model that made it reads it.
type Input any

// Result is one item's outcome: Data (JSON-encodable) on success, else Err.
type Result struct {
	Data any
	Err  error
}

// Model is one instance of a model.
type Model interface {
	Info() Info
	// ValidateParams checks the request's params object and returns one
	// FieldError per unknown or invalid key (pointer like "/params/threshold").
	// Nil means valid.
	ValidateParams(params map[string]json.RawMessage) []FieldError
	// Prepare decodes and pre-processes one image. An error fails only that
	// item; return an *ItemError to choose its status. It must not keep
	// image (or a slice of it) after it returns: the server reuses the
	// buffer for the next request.
	Prepare(image []byte, params map[string]json.RawMessage) (Input, error)
	// Run runs one batch and returns exactly len(batch) results, in order. A
	// non-nil error is a session-level failure: every item of the batch fails
	// with it. Run should return promptly once ctx is done.
	Run(ctx context.Context, batch []Input) ([]Result, error)
	// Close releases the instance's resources.
	Close() error
}

// FieldError names a bad part of a request by JSON pointer. It is the
// envelope's type, so a model's findings go into errors[] unchanged.
type FieldError = envelope.FieldError

// Warmer is optionally implemented by a Model that needs a first run before
// it answers at full speed (session creation, lazy allocations). The server
// calls Warm once per instance after the factory returns and before /ready
// turns true; an error stops startup with that reason.
type Warmer interface {
	Warm(ctx context.Context) error
}

// ItemError fails one item with a contract status.
type ItemError struct {
	Status envelope.Status
	Msg    string
}

func (e *ItemError) Error() string { return e.Msg }

// BadImage returns the item error for bytes that are empty, undecodable or
// refused (e.g. a decompression bomb).
func BadImage(format string, args ...any) *ItemError {
	return &ItemError{Status: envelope.StatusEmptyImage, Msg: fmt.Sprintf(format, args...)}
}

// Factory builds one instance from the model's own TOML file
// (model_config_file_path; may be empty for built-in models). Options carry
// server-level settings such as the ONNX Runtime library path.
type Factory func(configPath string, opts Options) (Model, error)

// Options are server-level settings a factory may need.
type Options struct {
	// ORTLib is the path of libonnxruntime.so.1 (config or MORTRED_ORT_LIB).
	ORTLib string
	// IntraOpThreads for ONNX Runtime sessions; 0 lets the backend choose.
	IntraOpThreads int
}

var (
	mu       sync.RWMutex
	registry = map[string]Factory{}
)

// Register makes a model type available by name. It panics on a duplicate,
// which is a programming error.
func Register(kind string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[kind]; dup {
		panic("model: duplicate type " + kind)
	}
	registry[kind] = f
}

// Lookup returns the factory for a model type.
func Lookup(kind string) (Factory, error) {
	mu.RLock()
	defer mu.RUnlock()
	f, ok := registry[kind]
	if !ok {
		return nil, fmt.Errorf("unknown model type %q (known: %v)", kind, kindsLocked())
	}
	return f, nil
}

// Kinds lists registered model types, sorted.
func Kinds() []string {
	mu.RLock()
	defer mu.RUnlock()
	return kindsLocked()
}

func kindsLocked() []string {
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
