package boxes

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
)

func TestIoU(t *testing.T) {
	for _, c := range []struct {
		a, b [4]float64
		want float64
	}{
		{[4]float64{0, 0, 2, 2}, [4]float64{0, 0, 2, 2}, 1},
		{[4]float64{0, 0, 2, 2}, [4]float64{1, 0, 3, 2}, 2.0 / 6},
		{[4]float64{0, 0, 2, 2}, [4]float64{2, 0, 4, 2}, 0}, // touching
		{[4]float64{0, 0, 1, 1}, [4]float64{5, 5, 6, 6}, 0},
	} {
		if got := IoU(c.a, c.b); got != c.want {
			t.Errorf("IoU(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if p := Params("s", "o"); len(p) != 3 || p[2].Max != MaxResults || p[0].Doc != "s, 0..1" {
		t.Errorf("%+v", p)
	}
}

func TestDefaults(t *testing.T) {
	d := Defaults{ScoreThreshold: 0.4, NMSIoU: 0.6, MaxResults: 100}
	if err := d.Check(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Defaults{{ScoreThreshold: 1.1}, {NMSIoU: -0.1}, {MaxResults: MaxResults + 1}, {MaxResults: -1}} {
		if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	// A request's params win over the defaults; the others stay.
	vals, errs := modelconf.Parse("detection", Params("s", "o"), map[string]json.RawMessage{"nms_iou": json.RawMessage("0.3")})
	if errs != nil {
		t.Fatal(errs)
	}
	if got := d.Request(vals); got != (Request{Score: 0.4, IoU: 0.3, Limit: 100}) {
		t.Errorf("request %+v", got)
	}
}
