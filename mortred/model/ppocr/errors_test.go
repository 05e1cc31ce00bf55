package ppocr

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/deps"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
)

// bomb is a valid PNG header that claims 50000×50000 pixels.
func bomb(t testing.TB) []byte {
	b := pngBytes(t, textimg.Line("x", 12, 1))
	binary.BigEndian.PutUint32(b[16:], 50000)
	binary.BigEndian.PutUint32(b[20:], 50000)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

func TestBadImagesFailOnlyTheirItem(t *testing.T) {
	g := golden(t)
	inputs := map[string][]byte{
		"ppocr_cls.toml": g["line_hello"], "ppocr_rec.toml": g["line_hello"],
		"ppocr_det.toml": g["page"], "ppocr.toml": g["page"],
	}
	for file, good := range inputs {
		t.Run(file, func(t *testing.T) {
			m := loaded(t, file)
			res := infer(t, m, nil, good, bomb(t), []byte("definitely not an image"), nil, good)
			for _, i := range []int{0, 4} {
				if res[i].Err != nil || res[i].Data == nil {
					t.Errorf("good item %d: %+v", i, res[i])
				}
			}
			for i, want := range map[int]string{1: "decompression bomb", 2: "unsupported", 3: "empty"} {
				var ie *model.ItemError
				if !errors.As(res[i].Err, &ie) || ie.Status != envelope.StatusEmptyImage || !strings.Contains(ie.Msg, want) {
					t.Errorf("item %d: %v, want status 3 mentioning %q", i, res[i].Err, want)
				}
			}
		})
	}
}

func raw(t *testing.T, js string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParamsValidation(t *testing.T) {
	cases := []struct {
		file, params string
		pointers     []string
	}{
		{"ppocr_cls.toml", `{}`, nil},
		{"ppocr_cls.toml", `{"threshold": 0.5}`, []string{"/params/threshold"}},
		{"ppocr_rec.toml", `{"box_thresh": 0.5}`, []string{"/params/box_thresh"}},
		{"ppocr_det.toml", `{"box_thresh": 0.5, "unclip_ratio": 2, "thresh": 0.2, "max_results": 3}`, nil},
		{"ppocr_det.toml", `{"box_thresh": 1.5, "unclip_ratio": 0, "max_results": 2.5, "cls_thresh": 0.5, "a/b": 1}`,
			[]string{"/params/a~1b", "/params/box_thresh", "/params/cls_thresh", "/params/max_results", "/params/unclip_ratio"}},
		{"ppocr_det.toml", `{"thresh": "0.3"}`, []string{"/params/thresh"}},
		{"ppocr.toml", `{"cls_thresh": 0.8, "min_score": 0.1, "use_angle_cls": false, "max_results": 0}`, nil},
		{"ppocr.toml", `{"use_angle_cls": 1, "min_score": -1}`, []string{"/params/min_score", "/params/use_angle_cls"}},
	}
	for _, c := range cases {
		m := loaded(t, c.file)
		errs := m.ValidateParams(raw(t, c.params))
		var got []string
		for _, e := range errs {
			got = append(got, e.Pointer)
			if e.Message == "" {
				t.Errorf("%s %s: empty message for %s", c.file, c.params, e.Pointer)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.pointers, " ") {
			t.Errorf("%s %s: pointers %v, want %v (%+v)", c.file, c.params, got, c.pointers, errs)
		}
		// Prepare refuses the same params with the 422 status.
		_, err := m.Prepare(pngBytes(t, textimg.Line("a", 20, 2)), raw(t, c.params))
		var ie *model.ItemError
		if (c.pointers != nil) != (errors.As(err, &ie) && ie.Status == envelope.StatusInvalidRequest) {
			t.Errorf("%s %s: Prepare error %v", c.file, c.params, err)
		}
	}
}

func TestParamsChangeResults(t *testing.T) {
	g := golden(t)
	det := loaded(t, "ppocr_det.toml")
	if n := len(data[[]Box](t, infer(t, det, raw(t, `{"max_results": 2}`), g["page"])[0])); n != 2 {
		t.Errorf("max_results 2: %d boxes", n)
	}
	if n := len(data[[]Box](t, infer(t, det, raw(t, `{"box_thresh": 1}`), g["page"])[0])); n != 0 {
		t.Errorf("box_thresh 1: %d boxes", n)
	}
	ocr := loaded(t, "ppocr.toml")
	lines := data[[]Line](t, infer(t, ocr, raw(t, `{"use_angle_cls": false}`), g["page"])[0])
	for _, l := range lines {
		if l.Angle != 0 || l.Text == textimg.TextServe {
			t.Errorf("without the classifier: %+v", l)
		}
	}
	if n := len(data[[]Line](t, infer(t, ocr, raw(t, `{"max_results": 1}`), g["page"])[0])); n != 1 {
		t.Errorf("max_results 1: %d lines", n)
	}
}

func TestRunHonoursCancel(t *testing.T) {
	m := loaded(t, "ppocr.toml")
	in, err := m.Prepare(golden(t)["page"], nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Run(ctx, []model.Input{in}); !errors.Is(err, context.Canceled) {
		t.Fatalf("run with a cancelled context: %v", err)
	}
}

func writeTOML(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigErrors(t *testing.T) {
	lib := orttest.Lib(t)
	store := orttest.ModelDir(t)
	dir := t.TempDir()
	opts := model.Options{ORTLib: lib}
	recBody := `type = "text_recognition"
model_dir = "no-such-store"
model_file = "ppocr/ch_PP-OCRv4_rec_infer.onnx"
output_name = "softmax_11.tmp_0"
dict_file = "ppocr/ppocr_keys_v1.txt"
`
	rec := writeTOML(t, dir, "rec.toml", recBody)

	t.Run("missing model file says how to get it", func(t *testing.T) {
		t.Setenv(deps.EnvModelDir, "")
		_, err := newRecognition(rec, opts)
		if err == nil || !errors.Is(err, ort.ErrMissing) || !strings.Contains(err.Error(), "make setup") || !strings.Contains(err.Error(), "no-such-store") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("MORTRED_MODEL_DIR replaces model_dir", func(t *testing.T) {
		t.Setenv(deps.EnvModelDir, store)
		m, err := newRecognition(rec, opts)
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
	})
	t.Run("missing library says how to get it", func(t *testing.T) {
		_, err := newRecognition(rec, model.Options{ORTLib: filepath.Join(dir, "libonnxruntime.so.1")})
		if err == nil || !strings.Contains(err.Error(), "make setup") || !strings.Contains(err.Error(), "MORTRED_ORT_LIB") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("missing dictionary", func(t *testing.T) {
		t.Setenv(deps.EnvModelDir, store)
		p := writeTOML(t, dir, "rec-nodict.toml", strings.Replace(recBody, "ppocr_keys_v1.txt", "nope.txt", 1))
		if _, err := newRecognition(p, opts); err == nil || !strings.Contains(err.Error(), "make setup") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("dictionary without the space does not fit the model", func(t *testing.T) {
		t.Setenv(deps.EnvModelDir, store)
		p := writeTOML(t, dir, "rec-nospace.toml", recBody+"use_space_char = false\n")
		if _, err := newRecognition(p, opts); err == nil || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("unknown key", func(t *testing.T) {
		p := writeTOML(t, dir, "rec-typo.toml", recBody+"min_widht = 100\n")
		if _, err := newRecognition(p, opts); err == nil || !strings.Contains(err.Error(), "min_widht") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("wrong output name lists the graph's", func(t *testing.T) {
		t.Setenv(deps.EnvModelDir, store)
		p := writeTOML(t, dir, "rec-out.toml", strings.Replace(recBody, "softmax_11.tmp_0", "probs", 1))
		if _, err := newRecognition(p, opts); err == nil || !strings.Contains(err.Error(), "softmax_11.tmp_0") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("label count must fit the classifier", func(t *testing.T) {
		p := writeTOML(t, dir, "cls.toml", `type = "classification"
model_file = "`+filepath.Join(store, "ppocr", "ch_ppocr_mobile_v2.0_cls_infer.onnx")+`"
output_name = "softmax_0.tmp_0"
input_size = [3, 48, 192]
labels = ["0", "90", "180"]
`)
		if _, err := newClassification(p, opts); err == nil || !strings.Contains(err.Error(), "3 labels") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("ocr needs detection and recognition", func(t *testing.T) {
		p := writeTOML(t, dir, "ocr.toml", "type = \"ocr\"\nclassification = \"cls.toml\"\n")
		if _, err := newOCR(p, opts); err == nil || !strings.Contains(err.Error(), "required") {
			t.Fatalf("error: %v", err)
		}
	})
	t.Run("no config file", func(t *testing.T) {
		if _, err := newDetection("", opts); err == nil || !strings.Contains(err.Error(), "model_config_file_path") {
			t.Fatalf("error: %v", err)
		}
		if _, err := newDetection(filepath.Join(dir, "none.toml"), opts); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("error: %v", err)
		}
	})
}

func TestRegistered(t *testing.T) {
	for _, k := range []string{"classification", "text_detection", "text_recognition", "ocr"} {
		if _, err := model.Lookup(k); err != nil {
			t.Error(err)
		}
	}
}

// TestPrepareConcurrentWithRun is what the server does: Prepare on request
// goroutines while the worker runs the instance. The race detector checks it.
func TestPrepareConcurrentWithRun(t *testing.T) {
	g := golden(t)
	for _, file := range []string{"ppocr_rec.toml", "ppocr.toml"} {
		m := loaded(t, file)
		img := g["line_hello"]
		if file == "ppocr.toml" {
			img = g["page"]
		}
		first, err := m.Prepare(img, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 4)
		for range 4 {
			go func() {
				_, err := m.Prepare(img, nil)
				done <- err
			}()
		}
		if _, err := m.Run(context.Background(), []model.Input{first}); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
}
