package modelconf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
)

// Norm is how a model wants its 0..255 RGB pixels: fed in RGB or BGR
// order, each fed channel c as (v − Sub[c])·Mul[c]. The model types keep
// their own TOML spelling of it (mean/std on 0..1 or on 0..255) and turn it
// into a Norm once.
type Norm struct {
	BGR      bool
	Sub, Mul [3]float32
}

// Unit feeds RGB scaled to 0..1.
var Unit = Norm{Mul: [3]float32{1.0 / 255, 1.0 / 255, 1.0 / 255}}

// MeanStd is the Norm of (v − mean)/std, with mean and std in the units of
// v (scale 1 for 0..255, 255 for mean and std given on 0..1).
func MeanStd(bgr bool, mean, std []float64, scale float64) Norm {
	n := Norm{BGR: bgr}
	for c := range 3 {
		n.Sub[c] = float32(mean[c] * scale)
		n.Mul[c] = float32(1 / (std[c] * scale))
	}
	return n
}

// ParseNorm checks a TOML's channel_order (RGB or BGR, any case), mean and
// std (3 values each, std positive) and returns their Norm (see MeanStd
// for scale).
func ParseNorm(order string, mean, std []float64, scale float64) (Norm, error) {
	var errs []error
	bgr := false
	switch strings.ToUpper(order) {
	case "RGB":
	case "BGR":
		bgr = true
	default:
		errs = append(errs, fmt.Errorf("channel_order %q: want RGB or BGR", order))
	}
	if len(mean) != 3 || len(std) != 3 {
		errs = append(errs, fmt.Errorf("mean and std need 3 values each (got %d and %d)", len(mean), len(std)))
	} else {
		for i, s := range std {
			if s <= 0 {
				errs = append(errs, fmt.Errorf("std[%d] = %v: must be positive", i, s))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Norm{}, err
	}
	return MeanStd(bgr, mean, std, scale), nil
}

// Planes writes img into one [3, H, W] item of an NCHW batch, top-left
// aligned: what lies beyond the image keeps the slab's values (the zeros
// of ort.Batch.Reset, the padding some models were trained with), and an
// image larger than H×W is cut.
func (n Norm) Planes(img *imageio.RGB, slab []float32, h, w int) {
	plane := h * w
	rows, cols := min(img.H, h), min(img.W, w)
	for c := range 3 {
		src := c
		if n.BGR {
			src = 2 - c
		}
		sub, mul := n.Sub[c], n.Mul[c]
		dst := slab[c*plane:]
		for y := range rows {
			row := img.Pix[3*y*img.W:]
			out := dst[y*w : y*w+cols]
			for x := range out {
				out[x] = (float32(row[3*x+src]) - sub) * mul
			}
		}
	}
}
