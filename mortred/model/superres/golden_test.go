package superres

import (
	"bytes"
	"errors"
	"image"
	"image/draw"
	_ "image/jpeg" // hubble_deep_field.jpg
	"image/png"
	"math"
	"strings"
	"testing"

	"go.uber.org/goleak"
	xdraw "golang.org/x/image/draw"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// zoo is the two shipped Real-ESRGAN models: the compact network and the
// RRDB one (conf/models/<file>), with the largest square each takes.
var zoo = []struct {
	file, name string
	side       int // side×side is at most max_input_pixels, (side+1)² is not
}{
	{"realesrgan.toml", "REALESRGAN_X4", 512},
	{"realesrgan_x4plus_anime.toml", "REALESRGAN_X4PLUS_ANIME", 256},
}

func load(t *testing.T, file string) model.Model { return modeltest.Load(t, task, file) }

// bicubic is the plain ×f upscale the models are measured against.
func bicubic(img *imageio.RGB, f int) *imageio.RGB {
	src := image.NewNRGBA(image.Rect(0, 0, img.W, img.H))
	for p := range img.W * img.H {
		copy(src.Pix[4*p:4*p+3], img.Pix[3*p:3*p+3])
		src.Pix[4*p+3] = 255
	}
	dst := image.NewNRGBA(image.Rect(0, 0, f*img.W, f*img.H))
	xdraw.CatmullRom.Scale(dst, dst.Bounds(), src, src.Bounds(), xdraw.Src, nil)
	return imageio.FromImage(dst)
}

// crop cuts a w×h piece of a photograph at (x, y), as PNG bytes and RGB.
func crop(t *testing.T, photo string, x, y, w, h int) ([]byte, *imageio.RGB) {
	t.Helper()
	src, _, err := image.Decode(bytes.NewReader(modeltest.Photo(t, photo)))
	if err != nil {
		t.Fatal(err)
	}
	dst := image.NewNRGBA(image.Rect(0, 0, w, h))
	draw.Draw(dst, dst.Bounds(), src, image.Pt(x, y), draw.Src)
	var b bytes.Buffer
	if err := png.Encode(&b, dst); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), imageio.FromImage(dst)
}

func upscaled(t *testing.T, r model.Result) (envelope.SuperResolution, *imageio.RGB) {
	t.Helper()
	s := modeltest.Data[envelope.SuperResolution](t, r)
	img := modeltest.PNG(t, s.Image)
	if img.Bounds().Dx() != s.Width || img.Bounds().Dy() != s.Height {
		t.Fatalf("PNG %v, payload says %d×%d", img.Bounds(), s.Width, s.Height)
	}
	return s, imageio.FromImage(img)
}

// shrink averages each 4×4 block back to one pixel.
func shrink(img *imageio.RGB, f int) *imageio.RGB {
	out := imageio.NewRGB(img.W/f, img.H/f)
	for y := range out.H {
		for x := range out.W {
			for c := range 3 {
				sum := 0
				for dy := range f {
					for dx := range f {
						sum += int(img.Pix[3*((y*f+dy)*img.W+x*f+dx)+c])
					}
				}
				out.Pix[3*(y*out.W+x)+c] = uint8((sum + f*f/2) / (f * f))
			}
		}
	}
	return out
}

func meanAbsDiff(a, b *imageio.RGB) float64 {
	var s float64
	for i := range a.Pix {
		s += math.Abs(float64(a.Pix[i]) - float64(b.Pix[i]))
	}
	return s / float64(len(a.Pix))
}

// edges is the mean absolute horizontal difference: how sharp an image is.
func edges(img *imageio.RGB) float64 {
	var s float64
	for y := range img.H {
		for x := 1; x < img.W; x++ {
			for c := range 3 {
				s += math.Abs(float64(img.Pix[3*(y*img.W+x)+c]) - float64(img.Pix[3*(y*img.W+x-1)+c]))
			}
		}
	}
	return s / float64(3*img.H*(img.W-1))
}

func TestUpscalesTheAstronautsFace(t *testing.T) {
	// Her eyes, nose and mouth: a 48×40 crop at (196, 95).
	data, small := crop(t, "astronaut.png", 196, 95, 48, 40)
	for _, z := range zoo {
		t.Run(z.name, func(t *testing.T) {
			s, big := upscaled(t, modeltest.Infer(t, load(t, z.file), nil, data)[0])
			if s.Width != 192 || s.Height != 160 || s.Scale != 4 {
				t.Fatalf("%d×%d ×%d, want 192×160 ×4", s.Width, s.Height, s.Scale)
			}
			// The same picture: shrunk back, it is the input within a few
			// levels, and it stays close to a plain bicubic upscale.
			if d := meanAbsDiff(shrink(big, 4), small); d > 6 {
				t.Errorf("shrunk back, the answer differs from the input by %.1f levels on average", d)
			}
			cubic := bicubic(small, 4)
			if d := meanAbsDiff(big, cubic); d > 8 {
				t.Errorf("the answer differs from a bicubic upscale by %.1f levels on average", d)
			}
			// Sharper than the bicubic upscale.
			if e, b := edges(big), edges(cubic); e < 1.1*b {
				t.Errorf("edge strength %.2f, bicubic %.2f: not sharper", e, b)
			}
			t.Logf("%s: %.2f levels from bicubic, edges %.2f vs %.2f", z.name, meanAbsDiff(big, cubic), edges(big), edges(cubic))
		})
	}
}

func TestTooManyPixelsIs422AndCorruptFailsAlone(t *testing.T) {
	tiny, _ := crop(t, "coffee.png", 200, 100, 24, 16)
	for _, z := range zoo {
		t.Run(z.name, func(t *testing.T) {
			m := load(t, z.file)
			// One pixel row more than the largest square it takes.
			large, _ := crop(t, "hubble_deep_field.jpg", 0, 0, z.side, z.side+1)
			res := modeltest.Infer(t, m, nil, tiny, large, []byte("nope"), tiny)
			var ie *model.ItemError
			if !errors.As(res[1].Err, &ie) || ie.Status != envelope.StatusInvalidRequest || !strings.Contains(ie.Msg, "max_input_pixels") {
				t.Fatalf("%d×%d: %+v, want the invalid-request status", z.side, z.side+1, res[1])
			}
			if !errors.As(res[2].Err, &ie) || ie.Status != envelope.StatusEmptyImage {
				t.Fatalf("corrupt: %+v", res[2])
			}
			a, _ := upscaled(t, res[0])
			b, _ := upscaled(t, res[3])
			single, _ := upscaled(t, modeltest.Infer(t, m, nil, tiny)[0])
			if a != b || a != single || a.Width != 96 {
				t.Errorf("the same image answered differently in one batch or alone (%d×%d)", a.Width, a.Height)
			}
			if errs := m.ValidateParams(modeltest.Params("scale", "2")); len(errs) != 1 || errs[0].Pointer != "/params/scale" {
				t.Errorf("params: %+v", errs)
			}
			if info := m.Info(); info.Name != z.name || info.Task != task {
				t.Errorf("info %+v", info)
			}
		})
	}
}
