package ppocr

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"testing"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// loaded returns the shared instance built from conf/models/<file>.
func loaded(t testing.TB, file string) model.Model {
	t.Helper()
	kind := map[string]string{"ppocr_cls.toml": "classification", "ppocr_det.toml": "text_detection",
		"ppocr_rec.toml": "text_recognition", "ppocr.toml": "ocr", "nsfw_mobilenet_v2.toml": "classification"}[file]
	return modeltest.Load(t, kind, file)
}

func pngBytes(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// infer prepares each image and runs them as one batch; a Prepare error is
// returned in that item's Result.
func infer(t testing.TB, m model.Model, params map[string]json.RawMessage, images ...[]byte) []model.Result {
	t.Helper()
	return modeltest.Infer(t, m, params, images...)
}
