package warmup

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
)

func TestDefaultSamples(t *testing.T) {
	samples := DefaultSamples()
	if len(samples) < 2 {
		t.Fatalf("%d samples", len(samples))
	}
	decode := func(b []byte) image.Image {
		t.Helper()
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return img
	}

	gray := decode(samples[0])
	if gray.Bounds() != image.Rect(0, 0, 64, 64) || gray.ColorModel() != color.GrayModel {
		t.Errorf("gradient: %v %T", gray.Bounds(), gray)
	}
	if lo, hi := color.GrayModel.Convert(gray.At(0, 0)).(color.Gray).Y, color.GrayModel.Convert(gray.At(63, 63)).(color.Gray).Y; lo != 0 || hi != 255 {
		t.Errorf("gradient runs %d..%d, want 0..255", lo, hi)
	}

	pic := decode(samples[1])
	if pic.Bounds() != image.Rect(0, 0, 96, 64) {
		t.Errorf("picture: %v", pic.Bounds())
	}
	colors := map[color.RGBA]int{}
	for y := range 64 {
		for x := range 96 {
			colors[color.RGBAModel.Convert(pic.At(x, y)).(color.RGBA)]++
		}
	}
	for _, c := range []color.RGBA{{R: 220, G: 30, B: 30, A: 255}, {G: 160, B: 60, A: 255}, {R: 20, G: 40, B: 200, A: 255}, {A: 255}} {
		if colors[c] < 20 {
			t.Errorf("picture has %d pixels of %v", colors[c], c)
		}
	}

	// Every call builds the same images afresh: a caller may modify its own.
	again := DefaultSamples()
	samples[0][0] ^= 0xff
	if !bytes.Equal(again[1], samples[1]) || bytes.Equal(again[0], samples[0]) {
		t.Error("DefaultSamples is not deterministic or shares its slices")
	}
}
