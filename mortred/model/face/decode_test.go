package face

import (
	"math"
	"reflect"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

func TestDecodeGridPlacesAnchorsAtCellCentres(t *testing.T) {
	g := grid{Cells: 2, Anchors: 2}
	scores := []float32{-10, 0, 10, -10, -10, -10, 200, -10} // sigmoid: ~0, 0.5, ~1, …, 1 (clamped logit)
	boxes := make([]float32, 8*16)
	// Anchor 2 is cell 1 (x=1, y=0): centre (0.75, 0.25); offset by 8 px of 16.
	boxes[1*16+2], boxes[1*16+3] = 1, 1
	b := boxes[2*16:]
	b[0], b[1], b[2], b[3] = 8, -4, 4, 2
	b[4], b[5] = 1.6, 3.2
	// Anchor 6 is cell 3 (x=1, y=1) with a zero-size box: dropped.
	got := decodeGrid(nil, g, scores, boxes, 16, 0.5)
	if len(got) != 2 {
		t.Fatalf("%d candidates, want anchors 1 (score 0.5) and 2: %+v", len(got), got)
	}
	c := got[1]
	want := candidate{cx: 0.75 + 0.5, cy: 0, w: 0.25, h: 0.125}
	if math.Abs(c.score-1) > 1e-4 || !near(c.cx, want.cx) || !near(c.cy, want.cy) || !near(c.w, want.w) || !near(c.h, want.h) {
		t.Errorf("decoded %+v, want %+v", c, want)
	}
	if kp := c.kp[0]; math.Abs(kp[0]-0.85) > 1e-6 || math.Abs(kp[1]-0.45) > 1e-6 {
		t.Errorf("keypoint 0 %v, want [0.85 0.45]", kp)
	}
	if !near(got[0].cx, 0.25) || !near(got[0].cy, 0.25) || !near(got[0].score, 0.5) {
		t.Errorf("anchor 1 (cell 0) at %v,%v", got[0].cx, got[0].cy)
	}
}

func TestWeightedNMSBlendsOverlapsAndKeepsApartOnes(t *testing.T) {
	c := func(s, cx float64) candidate { return candidate{score: s, cx: cx, cy: 0.5, w: 0.2, h: 0.2} }
	got := weightedNMS([]candidate{c(0.6, 0.52), c(0.9, 0.5), c(0.7, 0.1), c(0.3, 0.9)}, 0.3)
	if len(got) != 3 {
		t.Fatalf("%d faces, want 3: %+v", len(got), got)
	}
	// 0.9 at 0.5 and 0.6 at 0.52 overlap: blended, weighted by score.
	if got[0].score != 0.9 || math.Abs(got[0].cx-(0.9*0.5+0.6*0.52)/1.5) > 1e-12 {
		t.Errorf("blended face %+v", got[0])
	}
	if got[1].score != 0.7 || !near(got[1].cx, 0.1) || got[2].score != 0.3 || !near(got[2].cx, 0.9) {
		t.Errorf("apart faces %+v %+v", got[1], got[2])
	}
}

func TestLetterboxMapsBackAndClamps(t *testing.T) {
	l := letterbox{s: 0.25, ox: 0, oy: 16, w: 512, h: 384}
	if x, y := l.toImage(0.5, 0.5, 128); x != 256 || y != 192 {
		t.Errorf("centre → %v,%v", x, y)
	}
	if x, y := l.toImage(-0.1, 0.05, 128); x != 0 || y != 0 {
		t.Errorf("outside → %v,%v, want clamped to 0,0", x, y)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The params the model takes are the ones docs/openapi.json publishes.
func TestParamsMatchTheDocumentedSchema(t *testing.T) {
	modeltest.ParamsMatchSchema(t, reflect.TypeFor[envelope.FaceDetectionParams](), modelconf.Keys(params))
}
