// Package orttest finds the ONNX Runtime library and the PP-OCR models for
// tests and benchmarks by package deps's search with the repository root as
// the working directory: the environment first (MORTRED_ORT_LIB,
// MORTRED_MODEL_DIR, as `make` sets them), else the repository's .deps/.
// A missing file fails the test with how to get it; it never skips.
package orttest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/envconf"
	"github.com/fe64bb06/frontdoor/mortred/deps"
)

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

// finder searches as the binaries do (package deps), with the repository
// root as the working directory: a test runs in its package's directory.
func finder() deps.Finder {
	return deps.Finder{Env: envconf.OS(), WorkDir: RepoRoot()}
}

// LibPath returns the library path, or "" when none is found.
func LibPath() string {
	p, _ := finder().Lib("")
	return p
}

// Lib returns the library path or fails t with what was tried.
func Lib(t testing.TB) string {
	t.Helper()
	p, err := finder().Lib("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ModelDir returns the model store directory or fails t when the PP-OCR
// files are not all there.
func ModelDir(t testing.TB) string {
	t.Helper()
	d, err := finder().ModelStore(filepath.Join("ppocr", PPOCRFiles[0]), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range PPOCRFiles {
		if !exists(filepath.Join(d, "ppocr", f)) {
			t.Fatalf("PP-OCR model file %s not found in %q: run `make setup`, or set %s", f, filepath.Join(d, "ppocr"), deps.EnvModelDir)
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
