package imageio_test

import (
	"bytes"
	"image/jpeg"
	"image/png"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

// BenchmarkDecodePhotoJPEG decodes skimage's astronaut (512×512) sent as a
// quality-90 JPEG, as bench/ppocr sends the zoo's photograph: the part of
// every zoo model's Prepare that does not depend on the model.
func BenchmarkDecodePhotoJPEG(b *testing.B) {
	img, err := png.Decode(bytes.NewReader(modeltest.Photo(b, "astronaut.png")))
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := imageio.Decode(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}
