package modelconf

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/deps"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

type conf struct{ Head }

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPathRule(t *testing.T) {
	t.Setenv(deps.EnvModelDir, "")
	p := write(t, "model_dir = \"store\"\nmodel_file = \"a/b.onnx\"\n")
	touch(t, filepath.Join(filepath.Dir(p), "store", "a", "b.onnx"))
	var c conf
	if err := Load(p, &c); err != nil {
		t.Fatal(err)
	}
	if c.MaxPixels != imageio.DefaultMaxPixels {
		t.Errorf("max_pixels default %d", c.MaxPixels)
	}
	f := c.files
	if got := f.Path(c.ModelFile); got != filepath.Join(filepath.Dir(p), "store", "a", "b.onnx") {
		t.Errorf("relative to model_dir: %s", got)
	}
	if got := f.Path("/abs.onnx"); got != "/abs.onnx" {
		t.Errorf("absolute: %s", got)
	}
	// The variable wins over model_dir, and a store named by it that does
	// not hold the model is an error naming it, not a fall-back.
	moved := t.TempDir()
	touch(t, filepath.Join(moved, "a", "b.onnx"))
	t.Setenv(deps.EnvModelDir, moved)
	if err := Load(p, &c); err != nil || c.Path(c.ModelFile) != filepath.Join(moved, "a", "b.onnx") {
		t.Errorf("%s set: %s (%v)", deps.EnvModelDir, c.Path(c.ModelFile), err)
	}
	t.Setenv(deps.EnvModelDir, t.TempDir())
	if err := Load(p, &c); err == nil || !errors.Is(err, ort.ErrMissing) || !strings.Contains(err.Error(), deps.EnvModelDir) {
		t.Errorf("%s naming an empty store: %v", deps.EnvModelDir, err)
	}
	// Without model_dir the TOML's own directory is the store, whatever the
	// environment says.
	p = write(t, "model_file = \"b.onnx\"\n")
	c = conf{}
	if _ = Load(p, &c); c.Path(c.ModelFile) != filepath.Join(filepath.Dir(p), "b.onnx") || c.Dir() != filepath.Dir(p) {
		t.Errorf("no model_dir: %s", c.Path(c.ModelFile))
	}
}

func touch(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRefuses(t *testing.T) {
	var c conf
	for _, tc := range []struct{ path, want string }{
		{write(t, "model_file = \"x\"\ntypo = 1\n"), "unknown keys typo"},
		{filepath.Join(t.TempDir(), "none.toml"), "not found"},
		{write(t, "model_file = \n"), "model config"},
		{"", "needs a model TOML"},
		{write(t, "max_pixels = -1\n"), "max_pixels -1"},
	} {
		if err := Load(tc.path, &c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.path, err, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	ps := []Param{{Key: "p", Kind: Prob, Doc: "prob"}, {Key: "n", Kind: Count, Min: 1, Max: 5, Doc: "count"}, {Key: "n2", Kind: Count, Max: 5, Doc: "count"},
		{Key: "r", Kind: PosNum, Max: 4, Doc: "ratio"}, {Key: "b", Kind: Bool, Doc: "flag"}}
	v, errs := Parse("x", ps, map[string]json.RawMessage{"p": json.RawMessage("0.25"), "n": json.RawMessage("5"),
		"r": json.RawMessage("4"), "b": json.RawMessage("true")})
	if errs != nil || v.Float("p", 1) != 0.25 || v.Int("n", 0) != 5 || v.Float("q", 0.5) != 0.5 || v.Int("m", 7) != 7 ||
		v.Float("r", 0) != 4 || !v.Bool("b", false) || v.Bool("c", true) != true {
		t.Fatalf("%v %v", v, errs)
	}
	_, errs = Parse("x", ps, map[string]json.RawMessage{"p": json.RawMessage("-0.1"), "n": json.RawMessage("0"),
		"z~": json.RawMessage("1"), "s": json.RawMessage(`"` + strings.Repeat("a", 60) + `"`),
		"r": json.RawMessage("0"), "b": json.RawMessage("1"), "n2": json.RawMessage("null")})
	var got []string
	for _, e := range errs {
		got = append(got, e.Pointer+" "+e.Message)
	}
	want := []string{
		`/params/b b: want true or false, got 1 (flag)`,
		`/params/n n: 0 is not an integer in 1..5 (count)`,
		`/params/n2 n2: want a number, got null (count)`,
		`/params/p p: -0.1 is out of range (prob)`,
		`/params/r r: 0 is out of range (ratio)`,
		`/params/s unknown parameter "s" for a x model (accepted: p, n, n2, r, b)`,
		`/params/z~0 unknown parameter "z~" for a x model (accepted: p, n, n2, r, b)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, errs := Parse("x", nil, map[string]json.RawMessage{"a": json.RawMessage("1")}); len(errs) != 1 || !strings.Contains(errs[0].Message, "takes no params") {
		t.Fatalf("%v", errs)
	}
	if _, errs := Parse("x", ps, map[string]json.RawMessage{"p": json.RawMessage(`"` + strings.Repeat("a", 60) + `"`)}); len(errs) != 1 || !strings.Contains(errs[0].Message, "…") {
		t.Fatalf("long value not clipped: %v", errs)
	}
}

func TestEach(t *testing.T) {
	double := func(n int) (any, error) {
		if n < 0 {
			return nil, errors.New("negative")
		}
		return 2 * n, nil
	}
	res, err := Each("x", []model.Input{1, 2}, double)
	if err != nil || len(res) != 2 || res[0].Data != 2 || res[1].Data != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := Each("x", []model.Input{1, "two"}, double); err == nil || !strings.Contains(err.Error(), "item 1 was not prepared by this model (string)") {
		t.Fatalf("foreign item: %v", err)
	}
	if _, err := Each("x", []model.Input{-1}, double); err == nil || err.Error() != "negative" {
		t.Fatalf("failing item: %v", err)
	}
}

func TestCommon(t *testing.T) {
	h := &Head{Version: "v1", MaxPixels: 100}
	c := NewCommon("thing", []Param{{Key: "p", Kind: Prob, Doc: "prob"}}, h)
	if info := c.Info(); info.Name != "thing" || info.Version != "v1" || info.Task != "thing" {
		t.Errorf("info %+v (the name defaults to the task)", info)
	}
	if errs := c.ValidateParams(map[string]json.RawMessage{"q": json.RawMessage("1")}); len(errs) != 1 || errs[0].Pointer != "/params/q" {
		t.Errorf("%+v", errs)
	}
	var ie *model.ItemError
	if _, _, err := c.Decode(map[string]json.RawMessage{"p": json.RawMessage("2")}, nil); !errors.As(err, &ie) || !strings.Contains(ie.Msg, "/params/p") {
		t.Errorf("bad param: %v", err)
	}
	if _, _, err := c.Decode(nil, []byte("junk")); !errors.As(err, &ie) || ie.Status == 0 {
		t.Errorf("bad image: %v", err)
	}
}

func TestPlanes(t *testing.T) {
	// A 2×1 image into a [3, 2, 3] slab: top-left, the rest left as it was.
	img := imageio.NewRGB(2, 1)
	copy(img.Pix, []uint8{10, 20, 30, 40, 50, 60})
	slab := make([]float32, 3*2*3)
	for i := range slab {
		slab[i] = -7
	}
	MeanStd(true, []float64{1, 2, 3}, []float64{2, 4, 5}, 1).Planes(img, slab, 2, 3)
	want := []float32{
		(30 - 1) / 2.0, (60 - 1) / 2.0, -7, -7, -7, -7, // B first
		(20 - 2) / 4.0, (50 - 2) / 4.0, -7, -7, -7, -7,
		(10 - 3) / 5.0, (40 - 3) / 5.0, -7, -7, -7, -7,
	}
	for i := range want {
		if math.Abs(float64(slab[i]-want[i])) > 1e-6 {
			t.Fatalf("slab %v, want %v", slab, want)
		}
	}
	// Larger than the slab: cut; Unit is v/255 in RGB order.
	big := imageio.NewRGB(3, 2)
	for i := range big.Pix {
		big.Pix[i] = uint8(i * 10)
	}
	small := make([]float32, 3*1*2)
	Unit.Planes(big, small, 1, 2)
	for i, want := range []float32{0, 30, 10, 40, 20, 50} {
		if math.Abs(float64(small[i]*255-want)) > 1e-4 {
			t.Errorf("cut slab %v: [%d] is not %v/255", small, i, want)
		}
	}
	// MeanStd on 0..1 units is the PP-OCR spelling: (v/255 − 0.5)/0.5.
	if n := MeanStd(false, []float64{0.5, 0.5, 0.5}, []float64{0.5, 0.5, 0.5}, 255); math.Abs(float64((255-n.Sub[0])*n.Mul[0]-1)) > 1e-6 {
		t.Errorf("norm %+v", n)
	}
}

func TestOpen(t *testing.T) {
	opts := model.Options{ORTLib: orttest.Lib(t)}
	load := func(p string) (*conf, error) {
		c := &conf{}
		return c, Load(p, c)
	}
	names := func(*conf) []string { return []string{"x", "y"} }
	// The loader's error comes back as it is.
	if _, _, err := Open(write(t, "typo = 1\n"), opts, load, names); err == nil || !strings.Contains(err.Error(), "unknown keys typo") {
		t.Errorf("bad TOML: %v", err)
	}
	// A model file that is not there says which and how to get it.
	if _, _, err := Open(write(t, "model_file = \"/nonexistent/m.onnx\"\n"), opts, load, names); !errors.Is(err, ort.ErrMissing) || !strings.Contains(err.Error(), "/nonexistent/m.onnx") {
		t.Errorf("missing model: %v", err)
	}
	// The library is checked before the TOML is read.
	if _, _, err := Open(write(t, "typo = 1\n"), model.Options{ORTLib: "/nonexistent/libonnxruntime.so.1"}, load, names); err == nil || strings.Contains(err.Error(), "typo") {
		t.Errorf("a missing ONNX Runtime library: %v", err)
	}
}
