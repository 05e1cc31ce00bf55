package ppocr

import (
	"math"

	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
)

// normalise writes img, top-left aligned, into one [3,H,W] slab of a batch
// tensor as (v/255 - mean)/std in the configured channel order. The slab is
// already zero; what img does not cover stays zero (the padding).
func (b *base) normalise(img *imageio.RGB, slab []float32, H, W int) {
	plane := H * W
	for c := range 3 {
		src := c
		if b.bgr {
			src = 2 - c
		}
		m, s := b.mean[c]*255, b.scale[c]
		dst := slab[c*plane:]
		for y := 0; y < img.H && y < H; y++ {
			row := img.Pix[3*y*img.W:]
			out := dst[y*W:]
			for x := 0; x < img.W && x < W; x++ {
				out[x] = (float32(row[3*x+src]) - m) * s
			}
		}
	}
}

// lineWidth is the width of img resized to height h keeping its aspect
// ratio, at least 1 and at most maxW.
func lineWidth(img *imageio.RGB, h, maxW int) int {
	w := int(math.Ceil(float64(h) * float64(img.W) / float64(img.H)))
	return max(1, min(w, maxW))
}

// roundUp rounds n up to a multiple of step.
func roundUp(n, step int) int {
	if step <= 1 {
		return n
	}
	return (n + step - 1) / step * step
}
