package ppocr

import (
	"math"

	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
)

// cropLine cuts a text box out of img as an upright image, grown on every
// side by margin × the box height: a crop cut tight to the detector's box
// loses the spaces between words (ppocr-notes). Pixels outside img repeat
// its edge. A box at least 1.5 times taller than wide is vertical text and
// is turned a quarter counter-clockwise, as PaddleOCR does.
func cropLine(img *imageio.RGB, q quad, margin float64) *imageio.RGB {
	w := math.Max(dist(q[0], q[1]), dist(q[3], q[2]))
	h := math.Max(dist(q[0], q[3]), dist(q[1], q[2]))
	if w < 1 || h < 1 {
		w, h = math.Max(w, 1), math.Max(h, 1)
	}
	m := margin * h
	ux, uy := unit(q[0], q[1])
	vx, vy := unit(q[0], q[3])
	ow := max(1, int(math.Round(w+2*m)))
	oh := max(1, int(math.Round(h+2*m)))
	ox := q[0][0] - m*ux - m*vx
	oy := q[0][1] - m*uy - m*vy
	out := imageio.NewRGB(ow, oh)
	for j := 0; j < oh; j++ {
		for i := 0; i < ow; i++ {
			fi, fj := float64(i)+0.5, float64(j)+0.5
			sx := ox + fi*ux + fj*vx - 0.5
			sy := oy + fi*uy + fj*vy - 0.5
			bilinear(img, sx, sy, out.Pix[3*(j*ow+i):])
		}
	}
	if float64(oh)/float64(ow) >= 1.5 {
		return rotate90CCW(out)
	}
	return out
}

func bilinear(img *imageio.RGB, x, y float64, dst []uint8) {
	x = clampF(x, 0, float64(img.W-1))
	y = clampF(y, 0, float64(img.H-1))
	x0, y0 := int(x), int(y)
	x1, y1 := min(x0+1, img.W-1), min(y0+1, img.H-1)
	fx, fy := x-float64(x0), y-float64(y0)
	for c := range 3 {
		p00 := float64(img.Pix[3*(y0*img.W+x0)+c])
		p01 := float64(img.Pix[3*(y0*img.W+x1)+c])
		p10 := float64(img.Pix[3*(y1*img.W+x0)+c])
		p11 := float64(img.Pix[3*(y1*img.W+x1)+c])
		top := p00 + (p01-p00)*fx
		bot := p10 + (p11-p10)*fx
		dst[c] = uint8(top + (bot-top)*fy + 0.5)
	}
}

func rotate90CCW(m *imageio.RGB) *imageio.RGB {
	out := imageio.NewRGB(m.H, m.W)
	for y := 0; y < m.H; y++ {
		for x := 0; x < m.W; x++ {
			// (x, y) goes to (y, W-1-x).
			copy(out.Pix[3*((m.W-1-x)*out.W+y):][:3], m.Pix[3*(y*m.W+x):][:3])
		}
	}
	return out
}

func dist(a, b [2]float64) float64 { return math.Hypot(b[0]-a[0], b[1]-a[1]) }

func unit(a, b [2]float64) (float64, float64) {
	d := dist(a, b)
	if d == 0 {
		return 1, 0
	}
	return (b[0] - a[0]) / d, (b[1] - a[1]) / d
}
