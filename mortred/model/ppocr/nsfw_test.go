package ppocr

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

// The nsfwjs MobileNetV2 classifier (conf/models/nsfw_mobilenet_v2.toml)
// is the generic classification type with its own TOML; its graph is the
// TF.js model converted by setup-models (scripts/tfjs2onnx).

var nsfwLabels = []string{"Drawing", "Hentai", "Neutral", "Porn", "Sexy"}

func TestNSFWCallsEverydayPhotosNeutral(t *testing.T) {
	m := loaded(t, "nsfw_mobilenet_v2.toml")
	// A portrait, a cup of coffee, a scanned page and a telescope image.
	for _, p := range []string{"astronaut.png", "coffee.png", "page.png", "hubble_deep_field.jpg"} {
		c := data[Class](t, infer(t, m, nil, modeltest.Photo(t, p))[0])
		var sum float64
		for _, s := range c.Scores {
			sum += float64(s)
		}
		if c.Category != "Neutral" || c.ClassID != 2 || c.Scores[2] < 0.8 || len(c.Scores) != 5 || math.Abs(sum-1) > 1e-4 {
			t.Errorf("%s: %+v, want Neutral with p ≥ 0.8 over 5 classes summing to 1", p, c)
		}
	}
	if info := m.Info(); info.Name != "NSFW_MOBILENETV2" || info.Task != "classification" {
		t.Errorf("info %+v", info)
	}
}

func TestNSFWBatchEqualsSingleAndCorruptItemFailsAlone(t *testing.T) {
	m := loaded(t, "nsfw_mobilenet_v2.toml")
	imgs := [][]byte{modeltest.Photo(t, "astronaut.png"), []byte("GIF89a broken"), modeltest.Photo(t, "coffee.png"),
		modeltest.Photo(t, "chelsea.png"), modeltest.Photo(t, "astronaut.png")}
	batch := infer(t, m, nil, imgs...)
	for i, img := range imgs {
		single := infer(t, m, nil, img)[0]
		if i == 1 {
			var ie *model.ItemError
			if !errors.As(batch[i].Err, &ie) || ie.Status != envelope.StatusEmptyImage {
				t.Fatalf("corrupt item: %+v, want the empty-image status", batch[i])
			}
			continue
		}
		got, want := data[Class](t, batch[i]), data[Class](t, single)
		if got.ClassID != want.ClassID || !reflect.DeepEqual(got.Category, nsfwLabels[got.ClassID]) {
			t.Errorf("item %d: batch %+v, single %+v", i, got, want)
		}
		for k := range got.Scores {
			if math.Abs(float64(got.Scores[k]-want.Scores[k])) > 1e-5 {
				t.Errorf("item %d class %d: batch %v, single %v", i, k, got.Scores[k], want.Scores[k])
			}
		}
	}
}
