package testmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/jpeg"
	"os"
	"testing"
	"time"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
)

func newModel(t *testing.T) model.Model {
	t.Helper()
	f, err := model.Lookup(Type)
	if err != nil {
		t.Fatal(err)
	}
	m, err := f("../../../conf/models/testmodel.toml", model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestClassifiesByBrightness(t *testing.T) {
	m := newModel(t)
	if m.Info().Name != "TESTMODEL" || m.Info().Task != "classification" {
		t.Fatalf("info %+v", m.Info())
	}
	dark, err := m.Prepare(GrayPNG(4, 4, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	var jb bytes.Buffer
	img := image.NewGray(image.Rect(0, 0, 16, 16))
	for i := range img.Pix {
		img.Pix[i] = 250
	}
	_ = jpeg.Encode(&jb, img, nil)
	light, err := m.Prepare(jb.Bytes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	webpBytes, err := os.ReadFile("../imageio/testdata/blue-purple-pink.lossy.webp")
	if err != nil {
		t.Fatal(err)
	}
	wp, err := m.Prepare(webpBytes, nil)
	if err != nil {
		t.Fatalf("webp: %v", err)
	}
	res, err := m.Run(context.Background(), []model.Input{dark, light, wp})
	if err != nil || len(res) != 3 {
		t.Fatalf("Run: %v %d", err, len(res))
	}
	if c := res[0].Data.(envelope.Classification); c.ClassID != 0 || c.Category != "dark" || len(c.Scores) != 2 {
		t.Fatalf("dark: %+v", c)
	}
	if c := res[1].Data.(envelope.Classification); c.ClassID != 1 || c.Category != "light" {
		t.Fatalf("light: %+v", c)
	}
}

func TestBadImageFailsItem(t *testing.T) {
	m := newModel(t)
	_, err := m.Prepare([]byte("not an image"), nil)
	var ie *model.ItemError
	if !errors.As(err, &ie) || ie.Status != envelope.StatusEmptyImage {
		t.Fatalf("err = %v", err)
	}
}

func TestParams(t *testing.T) {
	m := newModel(t)
	p := map[string]json.RawMessage{"delay_ms": json.RawMessage("30")}
	if errs := m.ValidateParams(p); errs != nil {
		t.Fatal(errs)
	}
	bad := map[string]json.RawMessage{"delay_ms": json.RawMessage("-1"), "x": json.RawMessage("1"), "session_error": json.RawMessage(`"yes"`)}
	if errs := m.ValidateParams(bad); len(errs) != 3 {
		t.Fatalf("errs %v", errs)
	}
	in, err := m.Prepare(GrayPNG(2, 2, 0), p)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := m.Run(context.Background(), []model.Input{in, in}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Fatalf("two items of 30 ms ran in %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Run(ctx, []model.Input{in}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	se, _ := m.Prepare(GrayPNG(2, 2, 0), map[string]json.RawMessage{"session_error": json.RawMessage("true")})
	if _, err := m.Run(context.Background(), []model.Input{in, se}); !errors.Is(err, ErrSession) {
		t.Fatalf("session error: %v", err)
	}
	bo, _ := m.Prepare(GrayPNG(2, 2, 0), map[string]json.RawMessage{"bad_output": json.RawMessage("true")})
	if res, err := m.Run(context.Background(), []model.Input{bo, bo}); err != nil || len(res) != 1 {
		t.Fatalf("bad output: %v %d", err, len(res))
	}
	if err := m.(model.Warmer).Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFactoryErrors(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{"type = \"other\"\n", "type = \"testmodel\"\ncolour = 1\n", "type = \"testmodel\"\nload_delay_ms = -1\n", "type ="} {
		p := dir + "/m.toml"
		_ = os.WriteFile(p, []byte(body), 0o644)
		if _, err := New(p, model.Options{}); err == nil {
			t.Errorf("accepted %q", body)
		}
	}
}
