package ppocr

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Models are loaded once per test binary, from the shipped conf/models files.
var (
	modelsMu sync.Mutex
	models   = map[string]model.Model{}
)

func confPath(t testing.TB, name string) string {
	t.Helper()
	root := orttest.RepoRoot()
	if root == "" {
		t.Fatal("cannot find the repository root (go.mod) above the working directory")
	}
	return filepath.Join(root, "conf", "models", name)
}

// loaded returns the shared instance built from conf/models/<file>.
func loaded(t testing.TB, file string) model.Model {
	t.Helper()
	lib := orttest.Lib(t)
	orttest.ModelDir(t)
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if m, ok := models[file]; ok {
		return m
	}
	kind := map[string]string{"ppocr_cls.toml": "classification", "ppocr_det.toml": "text_detection",
		"ppocr_rec.toml": "text_recognition", "ppocr.toml": "ocr"}[file]
	f, err := model.Lookup(kind)
	if err != nil {
		t.Fatal(err)
	}
	m, err := f(confPath(t, file), model.Options{ORTLib: lib, IntraOpThreads: 1})
	if err != nil {
		t.Fatalf("loading %s: %v", file, err)
	}
	models[file] = m
	return m
}

func pngBytes(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// infer prepares each image and runs them as one batch; a Prepare error is
// returned in that item's Result.
func infer(t testing.TB, m model.Model, params map[string]json.RawMessage, images ...[]byte) []model.Result {
	t.Helper()
	out := make([]model.Result, len(images))
	var batch []model.Input
	var idx []int
	for i, img := range images {
		in, err := m.Prepare(img, params)
		if err != nil {
			out[i] = model.Result{Err: err}
			continue
		}
		batch = append(batch, in)
		idx = append(idx, i)
	}
	if len(batch) > 0 {
		res, err := m.Run(context.Background(), batch)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if len(res) != len(batch) {
			t.Fatalf("run returned %d results for %d items", len(res), len(batch))
		}
		for k, i := range idx {
			out[i] = res[k]
		}
	}
	return out
}
