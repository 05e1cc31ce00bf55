// Package modeltest is what the model packages' tests share: loading a
// model from its shipped conf/models file, running images through
// Prepare + Run as the server does (and a batch against each image alone),
// params objects and their documented schema, payload PNGs, and the real
// photographs the golden tests use (Debian's python3-skimage data images, installed by
// `make setup-deb`). A missing file fails the test with how to get it; it
// never skips.
package modeltest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

// PhotoDir is where python3-skimage installs its sample photographs.
const PhotoDir = "/usr/lib/python3/dist-packages/skimage/data"

// Photo returns the bytes of one sample photograph (e.g. "astronaut.png").
func Photo(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(PhotoDir, name))
	if err != nil {
		t.Fatalf("photo %s: %v (it comes with Debian's python3-skimage: run `make setup-deb`)", name, err)
	}
	return b
}

// ConfPath is conf/models/<name> of this repository.
func ConfPath(t testing.TB, name string) string {
	t.Helper()
	root := orttest.RepoRoot()
	if root == "" {
		t.Fatal("cannot find the repository root (go.mod) above the working directory")
	}
	return filepath.Join(root, "conf", "models", name)
}

var (
	mu     sync.Mutex
	loaded = map[string]model.Model{}
)

// Load returns the instance of model type kind built from conf/models/<file>,
// shared by the tests of one binary (sessions are slow to create).
func Load(t testing.TB, kind, file string) model.Model {
	t.Helper()
	lib := orttest.Lib(t)
	orttest.ModelDir(t)
	mu.Lock()
	defer mu.Unlock()
	if m, ok := loaded[file]; ok {
		return m
	}
	f, err := model.Lookup(kind)
	if err != nil {
		t.Fatal(err)
	}
	m, err := f(ConfPath(t, file), model.Options{ORTLib: lib, IntraOpThreads: 1})
	if err != nil {
		t.Fatalf("loading %s: %v", file, err)
	}
	loaded[file] = m
	return m
}

// Infer prepares each image and runs them as one batch, as the server's
// batcher does; a Prepare error is returned in that item's Result.
func Infer(t testing.TB, m model.Model, params map[string]json.RawMessage, images ...[]byte) []model.Result {
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

// Data returns a successful result's payload as T.
func Data[T any](t testing.TB, r model.Result) T {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("item failed: %v", r.Err)
	}
	v, ok := r.Data.(T)
	if !ok {
		t.Fatalf("data is %T", r.Data)
	}
	return v
}

// Params is a request's params object from key, JSON value pairs:
// Params("top_k", "5").
func Params(kv ...string) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = json.RawMessage(kv[i+1])
	}
	return out
}

// ParamsMatchSchema fails unless the params a model takes (their keys, as
// modelconf.Keys gives them) are, in order, the JSON fields of its
// documented params type (the one docs/openapi.json publishes).
func ParamsMatchSchema(t testing.TB, documented reflect.Type, ours []string) {
	t.Helper()
	var doc []string
	for i := range documented.NumField() {
		name, _, _ := strings.Cut(documented.Field(i).Tag.Get("json"), ",")
		doc = append(doc, name)
	}
	if !reflect.DeepEqual(doc, ours) {
		t.Fatalf("the model takes params %v, %s documents %v", ours, documented.Name(), doc)
	}
}

// BatchAgainstSingles runs images as one batch, as the server's batcher
// does, and each image alone. An item listed in bad must fail with that
// status, alone and in the batch alike; for every other item same checks
// the batched result against the single one (and reports any difference
// itself). It returns the batched results.
func BatchAgainstSingles(t testing.TB, m model.Model, params map[string]json.RawMessage, images [][]byte,
	bad map[int]envelope.Status, same func(i int, batched, single model.Result)) []model.Result {
	t.Helper()
	batch := Infer(t, m, params, images...)
	for i, img := range images {
		single := Infer(t, m, params, img)[0]
		if want, isBad := bad[i]; isBad {
			for _, r := range []model.Result{batch[i], single} {
				var ie *model.ItemError
				if !errors.As(r.Err, &ie) || ie.Status != want {
					t.Fatalf("item %d: batched %+v, single %+v; want status %d alone", i, batch[i], single, want)
				}
			}
			continue
		}
		same(i, batch[i], single)
	}
	return batch
}

// PNG decodes a payload's base64 PNG.
func PNG(t testing.TB, b64 string) image.Image {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	return img
}
