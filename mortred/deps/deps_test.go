package deps

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/internal/envconf"
)

// layout makes dir/.deps with the library and a model file.
func layout(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{LibRel, filepath.Join(ModelRel, "ppocr/m.onnx")} {
		p := filepath.Join(dir, ".deps", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSearchOrder(t *testing.T) {
	root := t.TempDir()
	work, app, conf := filepath.Join(root, "work"), filepath.Join(root, "app"), filepath.Join(root, "conf")
	layout(t, work)
	layout(t, app)
	layout(t, conf)
	bin := filepath.Join(app, "bin")
	f := Finder{Env: envconf.Map(nil), WorkDir: work, BinDir: bin}

	check := func(name, got string, err error, want string) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	got, err := f.Lib("")
	check("Lib, working directory first", got, err, filepath.Join(work, ".deps", LibRel))
	got, err = f.ModelStore("ppocr/m.onnx", filepath.Join(conf, ".deps/models"), "model_dir")
	check("ModelStore, model_dir first", got, err, filepath.Join(conf, ".deps/models"))
	got, err = f.ModelStore("ppocr/m.onnx", filepath.Join(root, "nowhere"), "model_dir")
	check("ModelStore, model_dir without the file skipped", got, err, filepath.Join(work, ".deps/models"))

	f.WorkDir = filepath.Join(root, "empty")
	got, err = f.Lib("")
	check("Lib, beside the binary's directory", got, err, filepath.Join(app, ".deps", LibRel))
	got, err = f.ModelStore("ppocr/m.onnx", "", "")
	check("ModelStore, beside the binary's directory", got, err, filepath.Join(app, ".deps/models"))

	f.Env = envconf.Map(map[string]string{EnvLib: filepath.Join(conf, ".deps", LibRel), EnvModelDir: filepath.Join(conf, ".deps/models")})
	got, err = f.Lib("")
	check("Lib, the variable first", got, err, filepath.Join(conf, ".deps", LibRel))
	got, err = f.Lib(filepath.Join(work, ".deps", LibRel))
	check("Lib, a configured path before the variable", got, err, filepath.Join(work, ".deps", LibRel))
	got, err = f.ModelStore("ppocr/m.onnx", filepath.Join(work, ".deps/models"), "model_dir")
	check("ModelStore, the variable first", got, err, filepath.Join(conf, ".deps/models"))
}

func TestNotFoundSaysWhatWasTriedAndWhatToRun(t *testing.T) {
	root := t.TempDir()
	f := Finder{Env: envconf.Map(nil), WorkDir: filepath.Join(root, "w"), BinDir: filepath.Join(root, "a/bin")}
	_, err := f.Lib("")
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("Lib error %v is not a NotFoundError", err)
	}
	for _, want := range []string{"MORTRED_ORT_LIB (unset)", filepath.Join(root, "w/.deps", LibRel), filepath.Join(root, "a/.deps", LibRel), "`make setup`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Lib error lacks %q: %v", want, err)
		}
	}
	_, err = f.ModelStore("ppocr/m.onnx", filepath.Join(root, "conf/models"), "model_dir in x.toml")
	for _, want := range []string{"model store holding ppocr/m.onnx", "MORTRED_MODEL_DIR (unset)", filepath.Join(root, "conf/models") + " (model_dir in x.toml)", filepath.Join(root, "w/.deps/models"), "`make setup`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ModelStore error lacks %q: %v", want, err)
		}
	}
	f.Env = envconf.Map(map[string]string{EnvLib: "rel/lib.so", EnvModelDir: filepath.Join(root, "none")})
	if _, err := f.Lib(""); err == nil || !strings.Contains(err.Error(), "MORTRED_ORT_LIB") || !strings.Contains(err.Error(), "rel/lib.so") {
		t.Errorf("a wrong MORTRED_ORT_LIB: %v", err)
	}
	if _, err := f.ModelStore("ppocr/m.onnx", "", ""); err == nil || !strings.Contains(err.Error(), "MORTRED_MODEL_DIR") {
		t.Errorf("a wrong MORTRED_MODEL_DIR: %v", err)
	}
}
