package ppocr

import (
	"context"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/ppocr/textimg"
)

// Benchmarks of Prepare + Run per item, one instance, batches of 1 and 8.
func benchModel(b *testing.B, file string, batch int, img []byte) {
	m := loaded(b, file)
	b.ReportAllocs()
	for b.Loop() {
		in := make([]model.Input, batch)
		for i := range in {
			var err error
			if in[i], err = m.Prepare(img, nil); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := m.Run(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "items/s")
}

func BenchmarkRecognition(b *testing.B) {
	img := pngBytes(b, textimg.Line(textimg.TextHello, 32, 6))
	b.Run("batch1", func(b *testing.B) { benchModel(b, "ppocr_rec.toml", 1, img) })
	b.Run("batch8", func(b *testing.B) { benchModel(b, "ppocr_rec.toml", 8, img) })
}

func BenchmarkClassifier(b *testing.B) {
	img := pngBytes(b, textimg.Line(textimg.TextHello, 32, 6))
	b.Run("batch1", func(b *testing.B) { benchModel(b, "ppocr_cls.toml", 1, img) })
	b.Run("batch8", func(b *testing.B) { benchModel(b, "ppocr_cls.toml", 8, img) })
}

func BenchmarkOCRPage(b *testing.B) {
	img := pngBytes(b, textimg.Page(480, 340, textimg.PageLines))
	benchModel(b, "ppocr.toml", 1, img)
}
