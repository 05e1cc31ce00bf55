package ppocr

import (
	"math"

	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
)

// Images go into a batch by modelconf.Norm.Planes: top-left aligned, in
// the configured channel order as (v/255 − mean)/std, the rest of the slab
// left zero (the padding the PP-OCR models were trained with).

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
