package ctl

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
)

func describe(t *testing.T, payload any) string {
	t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	describeData(&CLI{Out: &out}, raw)
	return out.String()
}

func TestDescribeEachTask(t *testing.T) {
	// A 4×2 mask, its right half set.
	g := image.NewGray(image.Rect(0, 0, 4, 2))
	for y := range 2 {
		g.SetGray(2, y, color.Gray{Y: 255})
		g.SetGray(3, y, color.Gray{Y: 255})
	}
	var png_ bytes.Buffer
	if err := png.Encode(&png_, g); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		payload any
		want    string
	}{
		{"classification", map[string]any{"class_id": 2, "category": "Neutral", "scores": []float64{0.1, 0, 0.9}},
			"  Neutral (class 2)\n" +
				"      0 ███                            0.100\n" +
				"      1                                0.000\n" +
				"  >   2 ███████████████████████████    0.900\n"},
		{"classification with its top list", map[string]any{"class_id": 2, "category": "Neutral", "scores": []float64{0.1, 0, 0.9},
			"top": []map[string]any{{"class_id": 2, "category": "Neutral", "score": 0.9}, {"class_id": 0, "category": "Drawing", "score": 0.1}}},
			"  Neutral (class 2)\n" +
				"      0 ███                            0.100  Drawing\n" +
				"      1                                0.000\n" +
				"  >   2 ███████████████████████████    0.900  Neutral\n"},
		{"detection", []map[string]any{{"class_id": 3, "score": 0.7927, "category": "motorcycle", "bbox": []float64{105.7, 75, 687.6, 453.9}}},
			"  motorcycle     0.793  box [106 75 688 454]\n"},
		{"faces", []map[string]any{{"score": 0.921, "bbox": []float64{179.1, 81.3, 271.7, 173.9},
			"keypoints": [][2]float64{{205.2, 100.5}, {249.4, 108.5}, {223.9, 123.9}, {220.5, 144.6}, {178, 109.2}, {271, 125.1}}}},
			"  face      0.921  box [179 81 272 174]\n" +
				"    right eye (205, 100), left eye (249, 108), nose tip (224, 124), mouth (220, 145), right ear (178, 109), left ear (271, 125)\n"},
		{"ocr", []map[string]any{{"text": "HELLO", "score": 0.99, "bbox": []float64{1, 2, 3, 4}, "polygon": [][2]float64{}}},
			"  \"HELLO\"                                  score 0.990  bbox [1 2 3 4]\n"},
		{"segmentation", map[string]any{"mask": base64.StdEncoding.EncodeToString(png_.Bytes()), "width": 4, "height": 2, "bbox": []float64{2, 0, 4, 2}, "coverage": 0.5},
			"  mask 4×2, coverage 50.0%, box [2 0 4 2]\n    ..##\n"},
		{"super-resolution", map[string]any{"image": base64.StdEncoding.EncodeToString([]byte("0123456789ab")), "width": 8, "height": 4, "scale": 4},
			"  upscaled ×4 to 8×4 (PNG, 12 bytes; --json has it in base64)\n"},
		{"other", map[string]any{"text": "abc", "score": 0.5},
			"  {\n    \"score\": 0.5,\n    \"text\": \"abc\"\n  }\n"},
	} {
		if got := describe(t, c.payload); got != c.want {
			t.Errorf("%s:\n%s\nwant:\n%s", c.name, got, c.want)
		}
	}
}
