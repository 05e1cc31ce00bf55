package warmup

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
)

// DefaultSamples returns the built-in sample images, PNG-encoded, that
// every image model accepts: a 64×64 grayscale diagonal gradient and a
// 96×64 colour picture (a shaded background, a red square, a green disc,
// a blue frame and rows of black bars like lines of text). They are the
// same on every call; the caller owns the returned slices.
func DefaultSamples() [][]byte {
	return [][]byte{encode(gradient()), encode(picture())}
}

func gradient() image.Image {
	img := image.NewGray(image.Rect(0, 0, 64, 64))
	for y := range 64 {
		for x := range 64 {
			img.SetGray(x, y, color.Gray{Y: uint8((x + y) * 255 / 126)})
		}
	}
	return img
}

func picture() image.Image {
	img := image.NewRGBA(image.Rect(0, 0, 96, 64))
	for y := range 64 {
		for x := range 96 {
			img.SetRGBA(x, y, color.RGBA{R: uint8(200 + x/4), G: uint8(210 + y/4), B: 230, A: 255})
		}
	}
	fill := func(r image.Rectangle, c color.Color) {
		draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
	}
	fill(image.Rect(6, 6, 30, 30), color.RGBA{R: 220, G: 30, B: 30, A: 255})
	draw.DrawMask(img, img.Bounds(), image.NewUniform(color.RGBA{G: 160, B: 60, A: 255}), image.Point{},
		disc{c: image.Pt(18, 46), r: 11}, image.Point{}, draw.Over)
	// A blue frame around the text block.
	frame := image.Rect(38, 6, 92, 58)
	blue := color.RGBA{R: 20, G: 40, B: 200, A: 255}
	fill(image.Rect(frame.Min.X, frame.Min.Y, frame.Max.X, frame.Min.Y+2), blue)
	fill(image.Rect(frame.Min.X, frame.Max.Y-2, frame.Max.X, frame.Max.Y), blue)
	fill(image.Rect(frame.Min.X, frame.Min.Y, frame.Min.X+2, frame.Max.Y), blue)
	fill(image.Rect(frame.Max.X-2, frame.Min.Y, frame.Max.X, frame.Max.Y), blue)
	// Lines of "words": black bars of varying length with gaps.
	words := [][]int{{9, 5, 12, 7}, {6, 10, 4, 11}, {12, 8, 9}, {5, 7, 6, 8}, {10, 13}}
	for row, ws := range words {
		x, y := 43, 11+row*9
		for _, w := range ws {
			if x+w > frame.Max.X-5 {
				break
			}
			fill(image.Rect(x, y, x+w, y+4), color.Black)
			x += w + 3
		}
	}
	return img
}

// disc is an alpha mask: opaque inside the circle of centre c, radius r.
type disc struct {
	c image.Point
	r int
}

func (d disc) ColorModel() color.Model { return color.AlphaModel }
func (d disc) Bounds() image.Rectangle {
	return image.Rect(d.c.X-d.r, d.c.Y-d.r, d.c.X+d.r+1, d.c.Y+d.r+1)
}
func (d disc) At(x, y int) color.Color {
	dx, dy := x-d.c.X, y-d.c.Y
	if dx*dx+dy*dy <= d.r*d.r {
		return color.Alpha{A: 255}
	}
	return color.Alpha{}
}

func encode(img image.Image) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		panic("warmup: encoding a built-in sample: " + err.Error()) // cannot happen for an in-memory image
	}
	return buf.Bytes()
}
