// Package orttest finds the ONNX Runtime library and the PP-OCR models for
// tests and benchmarks: the environment first (MORTRED_ORT_LIB,
// MORTRED_MODEL_DIR, as `make` sets them), else the repository's .deps/.
// A missing file fails the test with how to get it; it never skips.
package orttest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/envconf"
)

// EnvModelDir is the model store directory (make sets it to .deps/models).
const EnvModelDir = "MORTRED_MODEL_DIR"

// RepoRoot walks up from the working directory to the directory holding
// go.mod; "" if there is none.
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// LibPath returns the library path, or "" when none is found.
func LibPath() string {
	if p := envconf.OS().String("MORTRED_ORT_LIB", ""); p != "" {
		return p
	}
	if root := RepoRoot(); root != "" {
		return filepath.Join(root, ".deps", "onnxruntime", "libonnxruntime.so.1")
	}
	return ""
}

// ModelDirPath returns the model store directory (holding ppocr/), or "".
func ModelDirPath() string {
	if p := envconf.OS().String(EnvModelDir, ""); p != "" {
		return p
	}
	if root := RepoRoot(); root != "" {
		return filepath.Join(root, ".deps", "models")
	}
	return ""
}

// Lib returns the library path or fails t.
func Lib(t testing.TB) string {
	t.Helper()
	p := LibPath()
	if !exists(p) {
		t.Fatalf("ONNX Runtime library not found (%q): run make setup-models, or set MORTRED_ORT_LIB", p)
	}
	return p
}

// ModelDir returns the model store directory or fails t when the PP-OCR
// files are not all there.
func ModelDir(t testing.TB) string {
	t.Helper()
	d := ModelDirPath()
	for _, f := range PPOCRFiles {
		if !exists(filepath.Join(d, "ppocr", f)) {
			t.Fatalf("PP-OCR model file %s not found in %q: run make setup-models, or set %s", f, filepath.Join(d, "ppocr"), EnvModelDir)
		}
	}
	return d
}

// PPOCRFiles are the files setup-models puts in <model dir>/ppocr.
var PPOCRFiles = []string{
	"ch_PP-OCRv4_det_infer.onnx",
	"ch_PP-OCRv4_rec_infer.onnx",
	"ch_ppocr_mobile_v2.0_cls_infer.onnx",
	"ppocr_keys_v1.txt",
}

func exists(p string) bool {
	if p == "" {
		return false
	}
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
