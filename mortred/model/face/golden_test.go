package face

import (
	"bytes"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"reflect"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/boxes"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func blazeface(t *testing.T) model.Model { return modeltest.Load(t, task, "blazeface.toml") }

// The astronaut's face (skimage's astronaut.png, 512×512), measured by hand
// on a zoomed crop: brows to chin, cheek to cheek, and the keypoints in
// BlazeFace's order (the subject's right eye is on the image's left).
var (
	astronautFace = [4]float64{182, 83, 263, 173}
	astronautKP   = [4][2]float64{{207, 102}, {247, 103}, {227, 128}, {225, 147}} // eyes, nose tip, mouth
)

func faces(t *testing.T, r model.Result) []envelope.FaceDetection {
	t.Helper()
	return modeltest.Data[[]envelope.FaceDetection](t, r)
}

// checkAstronaut wants exactly one face at the hand-measured place, shifted
// by (dx, dy), its keypoints within tol pixels of the hand-measured ones.
func checkAstronaut(t *testing.T, got []envelope.FaceDetection, dx, dy, tol float64) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("found %d faces, want 1: %+v", len(got), got)
	}
	f := got[0]
	want := [4]float64{astronautFace[0] + dx, astronautFace[1] + dy, astronautFace[2] + dx, astronautFace[3] + dy}
	if o := boxes.IoU(f.BBox, want); o < 0.7 || f.Score < 0.8 {
		t.Errorf("face %+v: IoU %.2f with the hand-measured %v (want ≥ 0.7, score ≥ 0.8)", f, o, want)
	}
	if len(f.Keypoints) != keypoints {
		t.Fatalf("%d keypoints, want %d", len(f.Keypoints), keypoints)
	}
	for i, kp := range f.Keypoints {
		if kp[0] < f.BBox[0]-2 || kp[0] > f.BBox[2]+2 || kp[1] < f.BBox[1] || kp[1] > f.BBox[3] {
			t.Errorf("keypoint %d %v outside the box %v", i, kp, f.BBox)
		}
		if i < len(astronautKP) {
			w := astronautKP[i]
			if d := math.Hypot(kp[0]-w[0]-dx, kp[1]-w[1]-dy); d > tol {
				t.Errorf("keypoint %d at %v, %.1f px from the hand-measured %v", i, kp, d, [2]float64{w[0] + dx, w[1] + dy})
			}
		}
	}
}

func TestAstronautHasOneFace(t *testing.T) {
	checkAstronaut(t, faces(t, modeltest.Infer(t, blazeface(t), nil, modeltest.Photo(t, "astronaut.png"))[0]), 0, 0, 8)
}

func TestNoFaceInPhotosWithoutPeople(t *testing.T) {
	m := blazeface(t)
	// A cat, a cup of coffee and a motorcycle.
	for _, p := range []string{"chelsea.png", "coffee.png", "motorcycle_left.png"} {
		if got := faces(t, modeltest.Infer(t, m, nil, modeltest.Photo(t, p))[0]); len(got) != 0 {
			t.Errorf("%s: %d faces %+v, want none", p, len(got), got)
		}
	}
}

// shifted puts the astronaut on a wider grey canvas, so that the model sees
// it letterboxed (padding above and below) and the boxes must come back in
// the canvas's pixels.
func shifted(t *testing.T, dx int) []byte {
	t.Helper()
	src, err := png.Decode(bytes.NewReader(modeltest.Photo(t, "astronaut.png")))
	if err != nil {
		t.Fatal(err)
	}
	canvas := image.NewNRGBA(image.Rect(0, 0, 512+2*dx, 512))
	draw.Draw(canvas, canvas.Bounds(), image.NewUniform(color.Gray{Y: 128}), image.Point{}, draw.Src)
	draw.Draw(canvas, src.Bounds().Add(image.Pt(dx, 0)), src, image.Point{}, draw.Src)
	var b bytes.Buffer
	if err := png.Encode(&b, canvas); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestLetterboxedBoxesAreInInputPixels(t *testing.T) {
	// 640 px wide, the face is ~18 input pixels across: one input pixel is
	// 5 image pixels, so the keypoints get 3 input pixels of tolerance.
	checkAstronaut(t, faces(t, modeltest.Infer(t, blazeface(t), nil, shifted(t, 64))[0]), 64, 0, 15)
}

func TestBatchEqualsSingleAndCorruptItemFailsAlone(t *testing.T) {
	m := blazeface(t)
	imgs := [][]byte{modeltest.Photo(t, "astronaut.png"), modeltest.Photo(t, "coffee.png"), []byte("not an image"),
		shifted(t, 64), modeltest.Photo(t, "astronaut.png")}
	batch := modeltest.BatchAgainstSingles(t, m, nil, imgs, map[int]envelope.Status{2: envelope.StatusEmptyImage},
		func(i int, batched, single model.Result) {
			if !reflect.DeepEqual(faces(t, single), faces(t, batched)) {
				t.Errorf("item %d: batch %+v, single %+v", i, batched.Data, single.Data)
			}
		})
	checkAstronaut(t, faces(t, batch[4]), 0, 0, 8)
}

func TestParams(t *testing.T) {
	m := blazeface(t)
	astro := modeltest.Photo(t, "astronaut.png")
	if got := faces(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0.999"), astro)[0]); len(got) != 0 {
		t.Errorf("score_threshold 0.999: %+v, want no face", got)
	}
	if got := faces(t, modeltest.Infer(t, m, modeltest.Params("score_threshold", "0.05", "nms_iou", "0.3", "max_results", "1"), astro)[0]); len(got) != 1 {
		t.Errorf("max_results 1 at a low threshold: %d faces", len(got))
	}
	// Without blending every anchor on the face is its own detection.
	if got := faces(t, modeltest.Infer(t, m, modeltest.Params("nms_iou", "1"), astro)[0]); len(got) < 2 {
		t.Errorf("nms_iou 1: %d faces, want the unmerged anchors", len(got))
	}
	for _, c := range []struct {
		params map[string]json.RawMessage
		ptrs   []string
	}{
		{modeltest.Params("threshold", "0.5"), []string{"/params/threshold"}},
		{modeltest.Params("score_threshold", "1.5", "max_results", "2.5", "a/b", "1"), []string{"/params/a~1b", "/params/max_results", "/params/score_threshold"}},
		{modeltest.Params("nms_iou", `"high"`), []string{"/params/nms_iou"}},
	} {
		errs := m.ValidateParams(c.params)
		var ptrs []string
		for _, e := range errs {
			ptrs = append(ptrs, e.Pointer)
		}
		if !reflect.DeepEqual(ptrs, c.ptrs) {
			t.Errorf("params %s: pointers %v, want %v (%+v)", c.params, ptrs, c.ptrs, errs)
		}
		var ie *model.ItemError
		if _, err := m.Prepare(astro, c.params); !errors.As(err, &ie) || ie.Status != envelope.StatusInvalidRequest {
			t.Errorf("Prepare with params %s: %v, want the invalid-request status", c.params, err)
		}
	}
	if errs := m.ValidateParams(modeltest.Params("score_threshold", "0.9", "nms_iou", "0", "max_results", "0")); errs != nil {
		t.Errorf("valid params refused: %+v", errs)
	}
	if info := m.Info(); info.Name != "BLAZEFACE" || info.Task != task {
		t.Errorf("info %+v", info)
	}
}
