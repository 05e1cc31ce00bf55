// Package deps finds what `make setup` installed for mortred — the ONNX
// Runtime library and the model store — so that binaries run from a checkout
// work without extra variables. It is the one place with the search order
// (docs/mortred-server.md, "Finding ONNX Runtime and the models"):
//
//  1. the path the operator named — MORTRED_ORT_LIB or a server's
//     ort_lib_path, MORTRED_MODEL_DIR — used as given: a wrong explicit
//     path is an error, never silently replaced by a guess (a model TOML's
//     model_dir comes next and is skipped when it does not hold the model,
//     since the shipped one is itself a guess at the checkout's .deps);
//  2. .deps/ beside the working directory (./.deps/onnxruntime/…);
//  3. .deps/ beside the binary's directory (bin/../.deps/…), so that
//     bin/mortred-server finds the checkout's .deps from any directory.
//
// When nothing is found the error lists every path tried and says to run
// `make setup`.
package deps

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fe64bb06/frontdoor/internal/envconf"
)

// The variables that name the files outright.
const (
	EnvLib      = "MORTRED_ORT_LIB"
	EnvModelDir = "MORTRED_MODEL_DIR"
)

// Where `make setup` puts the files, relative to a .deps directory.
const (
	LibRel   = "onnxruntime/libonnxruntime.so.1"
	ModelRel = "models"
)

// Finder searches one environment, working directory and binary directory.
// The zero value reads nothing; Default reads the process's.
type Finder struct {
	Env     envconf.Env
	WorkDir string // the working directory ("" = none)
	BinDir  string // the running binary's directory ("" = none)
}

// Default is the running process's environment, working directory and
// binary directory (symlinks resolved, as the kernel reports it).
func Default() Finder {
	f := Finder{Env: envconf.OS()}
	f.WorkDir, _ = os.Getwd()
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		f.BinDir = filepath.Dir(exe)
	}
	return f
}

// candidate is one path tried and why it was tried.
type candidate struct{ path, from string }

// NotFoundError says what was looked for, every path tried, and what to do.
type NotFoundError struct {
	What  string   // "ONNX Runtime library", "model file ppocr/x.onnx"
	Tried []string // "path (why)"
	Fix   string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no %s found (tried %s): %s", e.What, strings.Join(e.Tried, "; "), e.Fix)
}

// Lib returns the absolute path of libonnxruntime.so.1. configured is a
// path the caller already chose ("" for none): a server's ort_lib_path with
// MORTRED_ORT_LIB applied over it (config.LoadServer), so it comes first.
func (f Finder) Lib(configured string) (string, error) {
	const what = "ONNX Runtime library"
	if configured != "" {
		return explicit(configured, "ort_lib_path or "+EnvLib, what, isFile)
	}
	if v, ok := f.Env.Value(EnvLib); ok {
		return explicit(v, EnvLib, what, isFile)
	}
	p, tried := search(f.beside(LibRel), isFile)
	if p != "" {
		return p, nil
	}
	return "", &NotFoundError{What: what, Tried: append([]string{EnvLib + " (unset)"}, tried...),
		Fix: "run `make setup` in the checkout (it installs .deps/" + LibRel + "), or set " + EnvLib + " to the path of libonnxruntime.so.1"}
}

// ModelStore returns the model store directory that holds probe (a model
// file's path relative to the store, e.g. "ppocr/ch_PP-OCRv4_det_infer.onnx").
// configured is the model TOML's model_dir, already made absolute, and
// configuredFrom names it in errors; it is tried after the variable and
// before the .deps guesses, and skipped when it does not hold probe (the
// shipped model_dir is itself a guess at the checkout's .deps/models).
func (f Finder) ModelStore(probe, configured, configuredFrom string) (string, error) {
	has := func(dir string) bool { return isDir(dir) && (probe == "" || isFile(filepath.Join(dir, probe))) }
	what := "model store"
	if probe != "" {
		what = "model store holding " + probe
	}
	if v, ok := f.Env.Value(EnvModelDir); ok {
		return explicit(v, EnvModelDir, what, has)
	}
	cands := f.beside(ModelRel)
	if configured != "" {
		cands = append([]candidate{{filepath.Clean(configured), configuredFrom}}, cands...)
	}
	p, tried := search(cands, has)
	if p != "" {
		return p, nil
	}
	return "", &NotFoundError{What: what, Tried: append([]string{EnvModelDir + " (unset)"}, tried...),
		Fix: "run `make setup` in the checkout (it fetches the models into .deps/" + ModelRel + "), or set " + EnvModelDir + " to the directory that holds them"}
}

// beside lists rel under .deps beside the working directory, then beside
// the binary's directory.
func (f Finder) beside(rel string) []candidate {
	var out []candidate
	if f.WorkDir != "" {
		out = append(out, candidate{filepath.Join(f.WorkDir, ".deps", rel), "beside the working directory"})
	}
	if f.BinDir != "" {
		out = append(out, candidate{filepath.Join(filepath.Dir(f.BinDir), ".deps", rel), "beside the binary's directory " + f.BinDir})
	}
	return out
}

// search returns the first candidate that passes ok, else "" and the
// candidates tried, each once ("path (why)").
func search(cands []candidate, ok func(string) bool) (string, []string) {
	var tried []string
	seen := map[string]bool{}
	for _, c := range cands {
		if seen[c.path] {
			continue
		}
		seen[c.path] = true
		if ok(c.path) {
			return c.path, nil
		}
		tried = append(tried, c.path+" ("+c.from+")")
	}
	return "", tried
}

// explicit checks a path the operator named (from says where: a variable
// or a key); relative paths are taken from the working directory.
func explicit(p, from, what string, ok func(string) bool) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s %s=%q: %v", what, from, p, err)
	}
	if !ok(abs) {
		return "", &NotFoundError{What: what, Tried: []string{abs + " (" + from + ")"},
			Fix: "fix " + from + " (or unset it to use what `make setup` installs in the checkout's .deps/)"}
	}
	return abs, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
