// Package textimg renders known text onto images with the Go fonts, so the
// OCR tests have golden inputs the repository makes itself.
package textimg

import (
	"image"
	"image/color"
	"image/draw"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

var (
	parseOnce sync.Once
	goFont    *opentype.Font
)

func face(size float64) font.Face {
	parseOnce.Do(func() {
		f, err := opentype.Parse(goregular.TTF)
		if err != nil {
			panic(err) // the embedded font always parses
		}
		goFont = f
	})
	fc, err := opentype.NewFace(goFont, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		panic(err)
	}
	return fc
}

// Line renders text in black on white at size pixels, with pad pixels of
// white around the ink's line box.
func Line(text string, size float64, pad int) *image.RGBA {
	fc := face(size)
	defer fc.Close()
	m := fc.Metrics()
	adv := font.MeasureString(fc, text)
	w := adv.Ceil() + 2*pad
	h := (m.Ascent + m.Descent).Ceil() + 2*pad
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	d := font.Drawer{Dst: img, Src: image.NewUniform(color.Black), Face: fc,
		Dot: fixed.Point26_6{X: fixed.I(pad), Y: fixed.I(pad) + m.Ascent}}
	d.DrawString(text)
	return img
}

// Rotate180 turns an image upside down.
func Rotate180(src *image.RGBA) *image.RGBA {
	b := src.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			out.Set(b.Dx()-1-x, b.Dy()-1-y, src.At(b.Min.X+x, b.Min.Y+y))
		}
	}
	return out
}

// Placed is one line on a page; its top-left corner is At.
type Placed struct {
	Text      string
	At        image.Point
	Size      float64
	Rotate180 bool
}

// Page draws lines on a white w×h page.
func Page(w, h int, lines []Placed) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	for _, l := range lines {
		li := Line(l.Text, l.Size, 0)
		if l.Rotate180 {
			li = Rotate180(li)
		}
		draw.Draw(img, li.Bounds().Add(l.At), li, image.Point{}, draw.Src)
	}
	return img
}
