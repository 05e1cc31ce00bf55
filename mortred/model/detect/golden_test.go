package detect

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/boxes"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// detectors are the shipped detection models: same contract, two heads.
var detectors = []struct{ file, name string }{{"nanodet.toml", "NANODET"}, {"centernet.toml", "CENTERNET"}}

func dets(t *testing.T, r model.Result) []envelope.Detection {
	t.Helper()
	return modeltest.Data[[]envelope.Detection](t, r)
}

// What is plainly in each photograph, boxed by hand on it.
var golden = []struct {
	photo, category string
	box             [4]float64
	minIoU          float64
}{
	{"astronaut.png", "person", [4]float64{20, 14, 362, 512}, 0.8},           // hair to the image's bottom edge, suit to suit
	{"camera.png", "person", [4]float64{0, 65, 325, 512}, 0.8},               // the cameraman, hands on the camera included
	{"motorcycle_left.png", "motorcycle", [4]float64{92, 78, 685, 452}, 0.8}, // rear light to front tyre, mirror to tyres
	// The cup alone (the model's box takes in some of the saucer).
	{"coffee.png", "cup", [4]float64{172, 18, 410, 310}, 0.5},
}

func TestDetectorsFindWhatIsInThePhoto(t *testing.T) {
	for _, d := range detectors {
		t.Run(d.name, func(t *testing.T) {
			m := modeltest.Load(t, task, d.file)
			for _, g := range golden {
				got := dets(t, modeltest.Infer(t, m, nil, modeltest.Photo(t, g.photo))[0])
				if len(got) == 0 {
					t.Errorf("%s: nothing found, want a %s", g.photo, g.category)
					continue
				}
				if best := got[0]; best.Category != g.category || boxes.IoU(best.BBox, g.box) < g.minIoU || best.Score < 0.4 {
					t.Errorf("%s: best %+v (IoU %.2f with the hand-measured %v); want a %s with IoU ≥ %.1f", g.photo, best, boxes.IoU(best.BBox, g.box), g.box, g.category, g.minIoU)
				}
			}
			if info := m.Info(); info.Name != d.name || info.Task != task {
				t.Errorf("info %+v", info)
			}
		})
	}
}

func TestBatchEqualsSingleAndCorruptItemFailsAlone(t *testing.T) {
	imgs := [][]byte{modeltest.Photo(t, "astronaut.png"), []byte("\xff\xd8\xff broken jpeg"), modeltest.Photo(t, "motorcycle_left.png"), modeltest.Photo(t, "coffee.png")}
	for _, d := range detectors {
		t.Run(d.name, func(t *testing.T) {
			modeltest.BatchAgainstSingles(t, modeltest.Load(t, task, d.file), nil, imgs, map[int]envelope.Status{1: envelope.StatusEmptyImage},
				func(i int, batched, single model.Result) {
					if !reflect.DeepEqual(dets(t, batched), dets(t, single)) {
						t.Errorf("item %d: batch %+v, single %+v", i, batched.Data, single.Data)
					}
				})
		})
	}
}

func TestParams(t *testing.T) {
	moto := modeltest.Photo(t, "motorcycle_left.png")
	for _, d := range detectors {
		t.Run(d.name, func(t *testing.T) {
			m := modeltest.Load(t, task, d.file)
			low := dets(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0.05"), moto)[0])
			if len(low) < 3 {
				t.Errorf("score_threshold 0.05: %d boxes, want more than at the default", len(low))
			}
			if got := dets(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0.05", "max_results", "2"), moto)[0]); len(got) != 2 || !reflect.DeepEqual(got, low[:2]) {
				t.Errorf("max_results 2: %+v, want the 2 best of %+v", got, low)
			}
			if got := dets(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0.99"), moto)[0]); len(got) != 0 {
				t.Errorf("score_threshold 0.99: %+v", got)
			}
			// Without suppression more boxes answer than with it.
			supp := dets(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0.05", "nms_iou", "0.3", "max_results", "0"), moto)[0])
			if all := dets(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0.05", "nms_iou", "1", "max_results", "0"), moto)[0]); len(all) <= len(supp) {
				t.Errorf("nms_iou 1: %d boxes, nms_iou 0.3: %d", len(all), len(supp))
			}
			// At threshold 0 every cell of every class is a candidate; the
			// best maxCandidates of them go through NMS.
			if got := dets(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0", "nms_iou", "1", "max_results", "0"), moto)[0]); len(got) != maxCandidates {
				t.Errorf("score_threshold 0 without NMS: %d boxes, want the %d best candidates", len(got), maxCandidates)
			}
			errs := m.ValidateParams(modeltest.Params("top_k", "5", "max_results", "-1", "nms_iou", "null"))
			var ptrs []string
			for _, e := range errs {
				ptrs = append(ptrs, e.Pointer)
			}
			if !reflect.DeepEqual(ptrs, []string{"/params/max_results", "/params/nms_iou", "/params/top_k"}) {
				t.Errorf("bad params: %+v", errs)
			}
			var ie *model.ItemError
			if _, err := m.Prepare(moto, modeltest.Params("top_k", "5")); !errors.As(err, &ie) || ie.Status != envelope.StatusInvalidRequest {
				t.Errorf("Prepare with a bad param: %v", err)
			}
		})
	}
}

func TestCenterNetDecode(t *testing.T) {
	// A 3×3 grid, stride 4, 2 classes. Class 0 peaks at (1, 1) with 0.9;
	// its neighbour (2, 1) has 0.8 but is not a peak. Class 1 has a plateau
	// of two equal 0.7 cells (both peaks, as max-pool equality makes them)
	// and a 0.2 below the threshold.
	heat := make([]float32, 9*2)
	set := func(x, y, k int, v float32) { heat[(y*3+x)*2+k] = v }
	set(1, 1, 0, 0.9)
	set(2, 1, 0, 0.8)
	set(0, 0, 1, 0.7)
	set(1, 0, 1, 0.7)
	set(2, 2, 1, 0.2)
	sizes := make([]float32, 9*4)
	copy(sizes[(1*3+1)*4:], []float32{1, 2, 3, 4})
	cn := centerNet{Heatmap: "h", Sizes: "s", Stride: 4}
	got, err := cn.decode(heat, sizes, 12, 2, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	want := []box{{class: 1, score: float64(float32(0.7)), b: [4]float64{0, 0, 0, 0}}, {class: 1, score: float64(float32(0.7)), b: [4]float64{4, 0, 4, 0}},
		{class: 0, score: float64(float32(0.9)), b: [4]float64{4 - 1, 4 - 2, 4 + 3, 4 + 4}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if _, err := cn.decode(heat[:17], sizes, 12, 2, 0.5); err == nil || !strings.Contains(err.Error(), "want 18 and 36") {
		t.Errorf("short heatmap: %v", err)
	}
}

func TestHeadConfigIsChecked(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, want string }{
		{"head = \"yolo\"\nreg_max = 1\nlevels = [{stride = 8, scores = \"a\", boxes = \"b\"}]\n", `head "yolo": want gfl or centernet`},
		{"head = \"centernet\"\n[centernet]\nheatmap = \"h\"\nsizes = \"s\"\nstride = 5\n", "stride dividing input_size"},
		{"head = \"centernet\"\nreg_max = 10\n[centernet]\nheatmap = \"h\"\nsizes = \"s\"\nstride = 4\n", "no reg_max or levels"},
		{"reg_max = 10\nlevels = [{stride = 8, scores = \"a\", boxes = \"b\"}]\n[centernet]\nstride = 4\n", "the gfl head needs reg_max and at least one of levels, and no [centernet]"},
	} {
		p := filepath.Join(dir, "d.toml")
		body := "type = \"detection\"\nmodel_file = \"/x.onnx\"\ninput_name = \"in\"\ninput_size = 32\nchannel_order = \"RGB\"\nmean = [0, 0, 0]\nstd = [1, 1, 1]\nlabels = [\"a\"]\n"
		// TOML tables come last: the head's keys before [centernet].
		if err := os.WriteFile(p, []byte(body+c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadConfig(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.body, err, c.want)
		}
	}
}

func TestDecodeLevelAndNMS(t *testing.T) {
	// One 2×2 level, stride 4, 2 classes, 3 bins (reg_max 2).
	scores := []float32{0.1, 0.9, 0, 0, 0, 0, 0.6, 0.5}
	dists := make([]float32, 4*4*3)
	for side := range 4 {
		dists[(0*4+side)*3+1] = 50 // cell 0: every side 1 bin → 4 px
	}
	got := decodeLevel(nil, scores, dists, 2, 4, 2, 3, 0.5)
	if len(got) != 3 || got[0].class != 1 || got[0].b != [4]float64{2 - 4, 2 - 4, 2 + 4, 2 + 4} {
		t.Fatalf("decoded %+v", got)
	}
	// Cell 3 (x=1, y=1) has uniform bins: mean 1 bin on each side.
	if c := got[1]; c.class != 0 || math.Abs(c.b[0]-2) > 1e-9 || math.Abs(c.b[3]-10) > 1e-9 || got[2].class != 1 {
		t.Errorf("cell 3: %+v", got[1:])
	}
	// NMS is per class: the two class-1 boxes do not overlap, class 0's
	// box is kept whatever it overlaps.
	kept := nms(append([]box{{class: 1, score: 0.8, b: [4]float64{-2, -2, 6, 6}}}, got...), 0.5)
	if len(kept) != 3 || kept[0].score < 0.89 || kept[1].class != 0 || kept[2].score != 0.5 {
		t.Errorf("nms kept %+v", kept)
	}
}

func TestParamsMatchTheDocumentedSchema(t *testing.T) {
	modeltest.ParamsMatchSchema(t, reflect.TypeFor[envelope.DetectionParams](), modelconf.Keys(params))
}
