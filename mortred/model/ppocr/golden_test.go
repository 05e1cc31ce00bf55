package ppocr

import (
	"image"
	"math"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
)

func golden(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, img := range textimg.Golden() {
		out[name] = pngBytes(t, img)
	}
	return out
}

func data[T any](t *testing.T, r model.Result) T {
	t.Helper()
	return modeltest.Data[T](t, r)
}

func TestRecognitionReadsGoldenLines(t *testing.T) {
	g := golden(t)
	rec := loaded(t, "ppocr_rec.toml")
	for name, want := range map[string]string{
		"line_mortred": textimg.TextMortred, "line_hello": textimg.TextHello,
		"line_serve": textimg.TextServe, "line_front": textimg.TextFront,
	} {
		got := data[Text](t, infer(t, rec, nil, g[name])[0])
		if got.Text != want || got.Score < 0.9 {
			t.Errorf("%s: read %q (score %.3f), want %q", name, got.Text, got.Score, want)
		}
	}
	if info := rec.Info(); info.Name != "PPOCR_REC" || info.Task != "text_recognition" {
		t.Errorf("info %+v", info)
	}
}

func TestClassifierTellsUpsideDown(t *testing.T) {
	g := golden(t)
	cls := loaded(t, "ppocr_cls.toml")
	for name, want := range map[string]string{
		"line_mortred": "0", "line_hello": "0", "line_hello_180": "180", "line_mortred_180": "180",
	} {
		got := data[Class](t, infer(t, cls, nil, g[name])[0])
		if got.Category != want || len(got.Scores) != 2 || got.Scores[got.ClassID] < 0.9 {
			t.Errorf("%s: %+v, want %s with p > 0.9", name, got, want)
		}
	}
}

// placed is where textimg drew each page line.
func placed() []image.Rectangle {
	var out []image.Rectangle
	for _, l := range textimg.PageLines {
		out = append(out, textimg.Line(l.Text, l.Size, 0).Bounds().Add(l.At))
	}
	return out
}

func iou(a image.Rectangle, b [4]int) float64 {
	r := image.Rect(b[0], b[1], b[2], b[3])
	in := a.Intersect(r)
	ia := float64(in.Dx() * in.Dy())
	return ia / (float64(a.Dx()*a.Dy()+r.Dx()*r.Dy()) - ia)
}

func TestDetectionFindsTheLines(t *testing.T) {
	g := golden(t)
	det := loaded(t, "ppocr_det.toml")
	boxes := data[[]Box](t, infer(t, det, nil, g["page"])[0])
	want := placed()
	if len(boxes) != len(want) {
		t.Fatalf("found %d boxes, want %d: %+v", len(boxes), len(want), boxes)
	}
	for i, b := range boxes {
		if o := iou(want[i], b.BBox); o < 0.6 || b.Score < 0.6 || len(b.Polygon) != 4 {
			t.Errorf("box %d %+v vs line at %v: IoU %.2f", i, b, want[i], o)
		}
	}
}

func TestOCRPipelineReadsThePageInOrder(t *testing.T) {
	g := golden(t)
	ocr := loaded(t, "ppocr.toml")
	lines := data[[]Line](t, infer(t, ocr, nil, g["page"])[0])
	want := placed()
	if len(lines) != len(textimg.PageLines) {
		t.Fatalf("got %d lines: %+v", len(lines), lines)
	}
	for i, l := range lines {
		pl := textimg.PageLines[i]
		angle := 0
		if pl.Rotate180 {
			angle = 180
		}
		if l.Text != pl.Text || l.Angle != angle || l.Score < 0.9 || iou(want[i], l.BBox) < 0.6 {
			t.Errorf("line %d: %+v, want %q at angle %d near %v", i, l, pl.Text, angle, want[i])
		}
	}
}

// TestBatchEqualsSingle runs each golden input alone, then all together in
// one batch, and wants the same answers.
func TestBatchEqualsSingle(t *testing.T) {
	g := golden(t)
	lines := []string{"line_mortred", "line_hello", "line_serve", "line_front", "line_hello_180", "line_mortred", "line_front"}
	pages := [][]byte{g["page"], g["line_hello"], g["page"], pngBytes(t, textimg.Page(640, 200, textimg.PageLines[:2]))}
	cases := []struct {
		file   string
		images [][]byte
	}{
		{"ppocr_rec.toml", pick(g, lines)},
		{"ppocr_cls.toml", pick(g, lines)},
		{"ppocr_det.toml", pages},
		{"ppocr.toml", pages},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			m := loaded(t, c.file)
			batch := infer(t, m, nil, c.images...)
			for i, img := range c.images {
				single := infer(t, m, nil, img)[0]
				if !same(single.Data, batch[i].Data) {
					t.Errorf("item %d: single %+v, in a batch %+v", i, single.Data, batch[i].Data)
				}
			}
		})
	}
}

func pick(g map[string][]byte, names []string) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		out[i] = g[n]
	}
	return out
}

// same compares results exactly except for scores, which may differ in the
// last float bits between batch sizes.
func same(a, b any) bool {
	close := func(x, y float32) bool { return math.Abs(float64(x-y)) < 1e-4 }
	switch a := a.(type) {
	case Text:
		b, ok := b.(Text)
		return ok && a.Text == b.Text && close(a.Score, b.Score)
	case Class:
		b, ok := b.(Class)
		if !ok || a.ClassID != b.ClassID || a.Category != b.Category || len(a.Scores) != len(b.Scores) {
			return false
		}
		for i := range a.Scores {
			if !close(a.Scores[i], b.Scores[i]) {
				return false
			}
		}
		return true
	case []Box:
		b, ok := b.([]Box)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i].BBox != b[i].BBox || !close(a[i].Score, b[i].Score) {
				return false
			}
		}
		return true
	case []Line:
		b, ok := b.([]Line)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i].Text != b[i].Text || a[i].Angle != b[i].Angle || a[i].BBox != b[i].BBox || !close(a[i].Score, b[i].Score) {
				return false
			}
		}
		return true
	}
	return false
}
