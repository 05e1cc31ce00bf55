package segment

import (
	"encoding/json"
	"errors"
	"image"
	"math"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func selfie(t *testing.T) model.Model { return modeltest.Load(t, task, "selfie.toml") }

func seg(t *testing.T, r model.Result) (envelope.Segmentation, *image.Gray) {
	t.Helper()
	s := modeltest.Data[envelope.Segmentation](t, r)
	img := modeltest.PNG(t, s.Mask)
	g, ok := img.(*image.Gray)
	if !ok || g.Bounds().Dx() != s.Width || g.Bounds().Dy() != s.Height {
		t.Fatalf("mask %T %v, payload says %d×%d", img, img.Bounds(), s.Width, s.Height)
	}
	return s, g
}

// person is a photograph with points measured by hand on it: inside the
// person, outside, and the top of the head.
type person struct {
	photo      string
	in, out    [][2]int
	top        int // y of the top of the head
	minX, maxX [2]float64
}

var people = []person{
	// The astronaut: face, suit, the helmet she holds; the flag, the rocket
	// model and the backdrop above her shoulder.
	{"astronaut.png", [][2]int{{222, 130}, {200, 400}, {420, 420}}, [][2]int{{20, 20}, {410, 120}, {330, 60}, {480, 250}}, 14,
		[2]float64{0, 25}, [2]float64{500, 512}},
	// The cameraman: face, coat, hands on the camera; sky, the tower, the
	// grass between the tripod's legs and to the right.
	{"camera.png", [][2]int{{215, 150}, {80, 350}, {300, 190}}, [][2]int{{400, 50}, {420, 150}, {290, 450}, {450, 350}}, 65,
		[2]float64{0, 5}, [2]float64{300, 350}},
}

func TestSelfieFindsThePerson(t *testing.T) {
	m := selfie(t)
	for _, p := range people {
		s, g := seg(t, modeltest.Infer(t, m, nil, modeltest.Photo(t, p.photo))[0])
		for _, pt := range p.in {
			if g.GrayAt(pt[0], pt[1]).Y != 255 {
				t.Errorf("%s: %v is not in the mask", p.photo, pt)
			}
		}
		for _, pt := range p.out {
			if g.GrayAt(pt[0], pt[1]).Y != 0 {
				t.Errorf("%s: %v is in the mask", p.photo, pt)
			}
		}
		b := s.BBox
		if math.Abs(b[1]-float64(p.top)) > 10 || b[0] < p.minX[0] || b[0] > p.minX[1] || b[2] < p.maxX[0] || b[2] > p.maxX[1] ||
			b[3] != float64(s.Height) || s.Coverage < 0.2 || s.Coverage > 0.7 {
			t.Errorf("%s: bbox %v coverage %v; want the head's top at y≈%d, x1 in %v, x2 in %v, down to the bottom edge",
				p.photo, b, s.Coverage, p.top, p.minX, p.maxX)
		}
	}
}

func TestSelfieFindsLittleInAPhotoWithoutPeople(t *testing.T) {
	s, _ := seg(t, modeltest.Infer(t, selfie(t), nil, modeltest.Photo(t, "motorcycle_left.png"))[0])
	if s.Coverage > 0.1 || s.Width != 741 || s.Height != 500 {
		t.Errorf("motorcycle: %dx%d coverage %v, want under 10%%", s.Width, s.Height, s.Coverage)
	}
}

func TestBatchEqualsSingleAndCorruptItemFailsAlone(t *testing.T) {
	m := selfie(t)
	// Six images: more than max_batch (4), so the batch is split.
	imgs := [][]byte{modeltest.Photo(t, "astronaut.png"), modeltest.Photo(t, "camera.png"), []byte("\x89PNG\r\n\x1a\n broken"),
		modeltest.Photo(t, "coffee.png"), modeltest.Photo(t, "motorcycle_left.png"), modeltest.Photo(t, "astronaut.png")}
	modeltest.BatchAgainstSingles(t, m, nil, imgs, map[int]envelope.Status{2: envelope.StatusEmptyImage}, func(i int, batched, single model.Result) {
		bs, _ := seg(t, batched)
		ss, _ := seg(t, single)
		// Batched runs may differ from single ones in the last float bits;
		// a pixel right at the threshold could flip, so compare the masks
		// by size, box and coverage.
		if bs.Width != ss.Width || bs.Height != ss.Height || bs.BBox != ss.BBox || math.Abs(bs.Coverage-ss.Coverage) > 1e-3 {
			t.Errorf("item %d: batch %v %v, single %v %v", i, bs.BBox, bs.Coverage, ss.BBox, ss.Coverage)
		}
	})
}

func TestParams(t *testing.T) {
	m := selfie(t)
	astro := modeltest.Photo(t, "astronaut.png")
	lo, _ := seg(t, modeltest.Infer(t, m, modeltest.Params("threshold", "0.05"), astro)[0])
	def, _ := seg(t, modeltest.Infer(t, m, nil, astro)[0])
	hi, _ := seg(t, modeltest.Infer(t, m, modeltest.Params("threshold", "0.95"), astro)[0])
	if !(lo.Coverage > def.Coverage && def.Coverage > hi.Coverage) {
		t.Errorf("coverage at thresholds 0.05, 0.5, 0.95: %v %v %v; want decreasing", lo.Coverage, def.Coverage, hi.Coverage)
	}
	if all, _ := seg(t, modeltest.Infer(t, m, modeltest.Params("threshold", "0"), astro)[0]); all.Coverage != 1 || all.BBox != [4]float64{0, 0, 512, 512} {
		t.Errorf("threshold 0: %v %v, want the whole image", all.Coverage, all.BBox)
	}
	errs := m.ValidateParams(map[string]json.RawMessage{"thresh": json.RawMessage("0.5"), "threshold": json.RawMessage("2")})
	if len(errs) != 2 || errs[0].Pointer != "/params/thresh" || errs[1].Pointer != "/params/threshold" || !strings.Contains(errs[1].Message, "out of range") {
		t.Errorf("bad params: %+v", errs)
	}
	var ie *model.ItemError
	if _, err := m.Prepare(astro, modeltest.Params("threshold", "true")); !errors.As(err, &ie) || ie.Status != envelope.StatusInvalidRequest {
		t.Errorf("Prepare with a bad param: %v", err)
	}
	if info := m.Info(); info.Name != "SELFIE" || info.Task != task {
		t.Errorf("info %+v", info)
	}
}

// The params the model takes are the ones docs/openapi.json publishes.
func TestParamsMatchTheDocumentedSchema(t *testing.T) {
	modeltest.ParamsMatchSchema(t, reflect.TypeFor[envelope.SegmentationParams](), modelconf.Keys(params))
}

func TestAxisSamplesPixelCentres(t *testing.T) {
	// 2 source cells onto 4: centres at -0.25 (clamped to 0), 0.25, 0.75,
	// 1.25 (both indices the last cell, so its weight does not matter).
	i0, i1, f := axis(4, 2)
	if !reflect.DeepEqual(i0, []int{0, 0, 0, 1}) || !reflect.DeepEqual(i1, []int{1, 1, 1, 1}) || !reflect.DeepEqual(f, []float32{0, 0.25, 0.75, 0.25}) {
		t.Errorf("axis(4, 2) = %v %v %v", i0, i1, f)
	}
}
