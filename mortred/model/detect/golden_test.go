package detect

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/boxes"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func nanodet(t *testing.T) model.Model { return modeltest.Load(t, task, "nanodet.toml") }

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

func TestNanoDetFindsWhatIsInThePhoto(t *testing.T) {
	m := nanodet(t)
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
}

func TestBatchEqualsSingleAndCorruptItemFailsAlone(t *testing.T) {
	m := nanodet(t)
	imgs := [][]byte{modeltest.Photo(t, "astronaut.png"), []byte("\xff\xd8\xff broken jpeg"), modeltest.Photo(t, "motorcycle_left.png"), modeltest.Photo(t, "coffee.png")}
	batch := modeltest.Infer(t, m, nil, imgs...)
	for i, img := range imgs {
		single := modeltest.Infer(t, m, nil, img)[0]
		if i == 1 {
			var ie *model.ItemError
			if !errors.As(batch[i].Err, &ie) || ie.Status != envelope.StatusEmptyImage {
				t.Fatalf("corrupt item: %+v, want the empty-image status", batch[i])
			}
			continue
		}
		if !reflect.DeepEqual(dets(t, batch[i]), dets(t, single)) {
			t.Errorf("item %d: batch %+v, single %+v", i, batch[i].Data, single.Data)
		}
	}
}

func TestParams(t *testing.T) {
	m := nanodet(t)
	moto := modeltest.Photo(t, "motorcycle_left.png")
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
	// With no suppression, every cell on the motorcycle answers.
	if got := dets(t, modeltest.Infer(t, m, modeltest.Params("nms_iou", "1"), moto)[0]); len(got) < 3 {
		t.Errorf("nms_iou 1: %d boxes", len(got))
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
	if info := m.Info(); info.Name != "NANODET" || info.Task != task {
		t.Errorf("info %+v", info)
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
