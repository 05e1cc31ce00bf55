package imageio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
)

func testImage(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(10 * x), uint8(20 * y), 200, 255})
		}
	}
	return img
}

func encPNG(t testing.TB, img image.Image) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encJPEG(t testing.TB, img image.Image) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngBomb is a valid small PNG whose header claims w×h.
func pngBomb(t testing.TB, w, h uint32) []byte {
	b := encPNG(t, testImage(4, 4))
	// IHDR: length(4) "IHDR"(4) width(4) height(4) ... crc over type+data.
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

func wantBadImage(t *testing.T, err error, substr string) {
	t.Helper()
	var ie *model.ItemError
	if !errors.As(err, &ie) || ie.Status != envelope.StatusEmptyImage {
		t.Fatalf("want an item error with status 3, got %v", err)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %q does not mention %q", err, substr)
	}
}

func TestDecodeFormats(t *testing.T) {
	src := testImage(8, 6)
	for name, data := range map[string][]byte{"png": encPNG(t, src), "jpeg": encJPEG(t, src)} {
		img, err := Decode(data, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if img.W != 8 || img.H != 6 {
			t.Fatalf("%s: %dx%d", name, img.W, img.H)
		}
		r, g, b := img.At(3, 2)
		if d := int(r) - 30; d > 15 || d < -15 || g < 28 || g > 52 || b < 185 {
			t.Fatalf("%s: pixel (3,2) = %d,%d,%d, want about 30,40,200", name, r, g, b)
		}
	}
	for _, f := range []string{"blue-purple-pink.lossy.webp", "gopher-doc.1bpp.lossless.webp"} {
		data, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := Decode(data, 0)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if img.W == 0 || img.H == 0 || len(img.Pix) != 3*img.W*img.H {
			t.Fatalf("%s: %dx%d with %d bytes", f, img.W, img.H, len(img.Pix))
		}
	}
}

func TestTransparentOverWhite(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	img.SetNRGBA(1, 0, color.NRGBA{0, 0, 0, 255})
	got, err := Decode(encPNG(t, img), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, g, b := got.At(0, 0); r != 255 || g != 255 || b != 255 {
		t.Fatalf("transparent pixel = %d,%d,%d, want white", r, g, b)
	}
	if r, g, b := got.At(1, 0); r != 0 || g != 0 || b != 0 {
		t.Fatalf("opaque black pixel = %d,%d,%d", r, g, b)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := encPNG(t, testImage(4, 4))
	cases := []struct {
		name, want string
		data       []byte
		max        int
	}{
		{"empty", "empty image", nil, 0},
		{"text", "unsupported", []byte("hello, not an image"), 0},
		{"gif", "unsupported", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00"), 0},
		{"truncated png", "png", good[:len(good)/2], 0},
		{"png header only", "png", good[:20], 0},
		{"bomb", "decompression bomb", pngBomb(t, 100000, 100000), 0},
		{"over a small limit", "over the limit of 15", good, 15},
		{"zero width", "png", pngBomb(t, 0, 4), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.data, c.max)
			wantBadImage(t, err, c.want)
		})
	}
	if _, err := Decode(good, 16); err != nil {
		t.Fatalf("exactly at the limit: %v", err)
	}
}

func TestResizeAndRotate(t *testing.T) {
	m := FromImage(testImage(10, 4))
	same := m.Resize(10, 4)
	if !bytes.Equal(same.Pix, m.Pix) {
		t.Fatal("resize to the same size changed pixels")
	}
	half := m.Resize(5, 2)
	if half.W != 5 || half.H != 2 {
		t.Fatal("size")
	}
	// Pixel centre of half (0,0) is between source columns 0 and 1, rows 0 and 1.
	if r, g, _ := half.At(0, 0); r != 5 || g != 10 {
		t.Fatalf("half (0,0) = %d,%d, want 5,10", r, g)
	}
	rot := m.Rotate180()
	r1, g1, b1 := m.At(2, 1)
	r2, g2, b2 := rot.At(10-1-2, 4-1-1)
	if r1 != r2 || g1 != g2 || b1 != b2 {
		t.Fatal("rotate180 moved the wrong pixel")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encPNG(f, testImage(3, 3)))
	f.Add(encJPEG(f, testImage(3, 3)))
	f.Add(pngBomb(f, 1<<20, 1<<20))
	f.Add([]byte("RIFF\x00\x00\x00\x00WEBPVP8 "))
	f.Add([]byte{0xFF, 0xD8, 0xFF})
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := Decode(data, 1<<16)
		if err != nil {
			var ie *model.ItemError
			if !errors.As(err, &ie) {
				t.Fatalf("error is not an item error: %v", err)
			}
			return
		}
		if img.W*img.H > 1<<16 || len(img.Pix) != 3*img.W*img.H {
			t.Fatalf("decoded %dx%d with %d bytes", img.W, img.H, len(img.Pix))
		}
	})
}

func TestFromImageFastPathsAgree(t *testing.T) {
	src := testImage(7, 5)
	src.SetNRGBA(2, 2, color.NRGBA{100, 50, 0, 128})
	rgba := image.NewRGBA(src.Bounds())
	gray := image.NewGray(src.Bounds())
	for y := 0; y < 5; y++ {
		for x := 0; x < 7; x++ {
			rgba.Set(x, y, src.At(x, y))
			gray.Set(x, y, src.At(x, y))
		}
	}
	// The generic path (via At) is the reference.
	type plain struct{ image.Image }
	for name, img := range map[string]image.Image{"nrgba": src, "rgba": rgba, "gray": gray} {
		ref := FromImage(plain{img})
		got := FromImage(img)
		for i := range ref.Pix {
			if d := int(ref.Pix[i]) - int(got.Pix[i]); d > 1 || d < -1 {
				t.Fatalf("%s: byte %d = %d, generic path %d", name, i, got.Pix[i], ref.Pix[i])
			}
		}
	}
}

// randomYCbCr is a w×h YCbCr image of the given ratio with random planes,
// its rectangle starting at (x0, y0).
func randomYCbCr(rng *rand.Rand, x0, y0, w, h int, ratio image.YCbCrSubsampleRatio) *image.YCbCr {
	m := image.NewYCbCr(image.Rect(x0, y0, x0+w, y0+h), ratio)
	for _, p := range [][]byte{m.Y, m.Cb, m.Cr} {
		for i := range p {
			p[i] = byte(rng.IntN(256))
		}
	}
	return m
}

// TestFromYCbCrExact: the row-wise conversion gives color.YCbCrToRGB's bytes
// for every subsampling ratio, odd sizes, a rectangle not at the origin and
// a sub-image, as the per-pixel offsets do.
func TestFromYCbCrExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ratios := []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422,
		image.YCbCrSubsampleRatio420, image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410}
	for _, ratio := range ratios {
		for _, c := range []struct{ x0, y0, w, h int }{{0, 0, 17, 9}, {3, 5, 13, 11}, {-3, -2, 9, 7}, {0, 0, 1, 1}} {
			full := randomYCbCr(rng, c.x0, c.y0, c.w, c.h, ratio)
			sub := full.SubImage(image.Rect(c.x0+1, c.y0+1, c.x0+c.w, c.y0+c.h)).(*image.YCbCr)
			for _, m := range []*image.YCbCr{full, sub} {
				got := FromImage(m)
				b := m.Bounds()
				i := 0
				for y := b.Min.Y; y < b.Max.Y; y++ {
					for x := b.Min.X; x < b.Max.X; x++ {
						yi, ci := m.YOffset(x, y), m.COffset(x, y)
						r, g, bl := color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
						if got.Pix[i] != r || got.Pix[i+1] != g || got.Pix[i+2] != bl {
							t.Fatalf("%v %v: pixel (%d,%d) = %v, want %v", ratio, b, x, y, got.Pix[i:i+3], []uint8{r, g, bl})
						}
						i += 3
					}
				}
			}
		}
	}
}

// BenchmarkFromYCbCr420 converts a 512×512 4:2:0 image, a decoded photo.
func BenchmarkFromYCbCr420(b *testing.B) {
	m := randomYCbCr(rand.New(rand.NewPCG(1, 2)), 0, 0, 512, 512, image.YCbCrSubsampleRatio420)
	b.SetBytes(512 * 512 * 3)
	for b.Loop() {
		FromImage(m)
	}
}
