package ppocr

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
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
		modeltest.Photo(t, "chelsea.png"), modeltest.Photo(t, "motorcycle_left.png"), modeltest.Photo(t, "astronaut.png")}
	// With and without the top list's params (per request, the same for
	// every item).
	for _, p := range []map[string]json.RawMessage{nil, modeltest.Params("top_k", "2", "score_threshold", "0.001")} {
		modeltest.BatchAgainstSingles(t, m, p, imgs, map[int]envelope.Status{1: envelope.StatusEmptyImage}, func(i int, batched, single model.Result) {
			got, want := data[Class](t, batched), data[Class](t, single)
			if got.ClassID != want.ClassID || got.Category != nsfwLabels[got.ClassID] || len(got.Top) != len(want.Top) || len(got.Top) == 0 {
				t.Errorf("params %s item %d: batch %+v, single %+v", p, i, got, want)
				return
			}
			for k := range got.Scores {
				if math.Abs(float64(got.Scores[k]-want.Scores[k])) > 1e-5 {
					t.Errorf("item %d class %d: batch %v, single %v", i, k, got.Scores[k], want.Scores[k])
				}
			}
			for k := range got.Top {
				if got.Top[k].ClassID != want.Top[k].ClassID {
					t.Errorf("params %s item %d: batch top %+v, single %+v", p, i, got.Top, want.Top)
				}
			}
		})
	}
}

func TestNSFWTopListFollowsTheParams(t *testing.T) {
	m := loaded(t, "nsfw_mobilenet_v2.toml")
	photo := modeltest.Photo(t, "chelsea.png")
	def := data[Class](t, infer(t, m, nil, photo)[0])
	// The TOML's defaults: three classes at or above 0.01, best first,
	// the first being the answer's class.
	if len(def.Top) == 0 || len(def.Top) > 3 || def.Top[0].ClassID != def.ClassID || def.Top[0].Category != def.Category {
		t.Fatalf("default top %+v for %+v", def.Top, def)
	}
	for i, c := range def.Top {
		if c.Score != def.Scores[c.ClassID] || c.Category != nsfwLabels[c.ClassID] || c.Score < 0.01 || (i > 0 && c.Score > def.Top[i-1].Score) {
			t.Errorf("top[%d] = %+v; scores %v", i, c, def.Scores)
		}
	}
	all := data[Class](t, infer(t, m, modeltest.Params("top_k", "5", "score_threshold", "0"), photo)[0])
	if len(all.Top) != 5 {
		t.Fatalf("top_k 5, threshold 0: %+v", all.Top)
	}
	seen := map[int]bool{}
	for _, c := range all.Top {
		seen[c.ClassID] = true
	}
	if len(seen) != 5 || !reflect.DeepEqual(all.Top[:len(def.Top)], def.Top) {
		t.Errorf("all five %+v, default %+v", all.Top, def.Top)
	}
	one := data[Class](t, infer(t, m, modeltest.Params("top_k", "1"), photo)[0])
	if len(one.Top) != 1 || one.Top[0] != def.Top[0] {
		t.Errorf("top_k 1: %+v", one.Top)
	}
	// A threshold above the best score leaves the list empty (but
	// present); the class and scores do not change.
	above := strconv.FormatFloat(float64(def.Top[0].Score)+1e-4, 'f', -1, 64)
	none := data[Class](t, infer(t, m, modeltest.Params("score_threshold", above), photo)[0])
	if b, _ := json.Marshal(none); none.Top == nil || len(none.Top) != 0 || none.ClassID != def.ClassID || !strings.Contains(string(b), `"top":[]`) {
		t.Errorf("threshold %s: %s", above, b)
	}
}

func TestClassificationParamsAreCheckedWithPointers(t *testing.T) {
	m := loaded(t, "nsfw_mobilenet_v2.toml")
	errs := m.ValidateParams(modeltest.Params("top_k", "6", "score_threshold", "1.5", "nms_iou", "0.5"))
	var ptrs []string
	for _, e := range errs {
		ptrs = append(ptrs, e.Pointer)
	}
	if !reflect.DeepEqual(ptrs, []string{"/params/nms_iou", "/params/score_threshold", "/params/top_k"}) ||
		!strings.Contains(errs[2].Message, "1..5") || !strings.Contains(errs[0].Message, "accepted: top_k, score_threshold") {
		t.Fatalf("errors %+v", errs)
	}
	for _, bad := range []string{"0", "2.5", "null", `"3"`} {
		if errs := m.ValidateParams(modeltest.Params("top_k", bad)); len(errs) != 1 || errs[0].Pointer != "/params/top_k" {
			t.Errorf("top_k %s: %+v", bad, errs)
		}
	}
	// Prepare checks them too (a server that skipped ValidateParams).
	var ie *model.ItemError
	if _, err := m.Prepare(modeltest.Photo(t, "coffee.png"), modeltest.Params("top_k", "6")); !errors.As(err, &ie) || ie.Status != envelope.StatusInvalidRequest {
		t.Errorf("Prepare with top_k 6: %v", err)
	}
	// PPOCR_CLS has two classes.
	if errs := loaded(t, "ppocr_cls.toml").ValidateParams(modeltest.Params("top_k", "3")); len(errs) != 1 || !strings.Contains(errs[0].Message, "1..2") {
		t.Errorf("PPOCR_CLS top_k 3: %+v", errs)
	}
}

func TestClassificationParamsMatchTheDocumentedSchema(t *testing.T) {
	m := loaded(t, "nsfw_mobilenet_v2.toml").(*Classification)
	modeltest.ParamsMatchSchema(t, reflect.TypeFor[envelope.ClassificationParams](), modelconf.Keys(m.params))
}
