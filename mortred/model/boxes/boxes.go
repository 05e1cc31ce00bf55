// Package boxes is what the box-answering model types share: the overlap
// measure their NMS uses and their common request params.
package boxes

import (
	"math"

	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
)

// MaxResults bounds max_results in model TOMLs and params.
const MaxResults = 1000

// IoU is the intersection over union of two x1, y1, x2, y2 boxes.
func IoU(a, b [4]float64) float64 {
	iw := math.Min(a[2], b[2]) - math.Max(a[0], b[0])
	ih := math.Min(a[3], b[3]) - math.Max(a[1], b[1])
	if iw <= 0 || ih <= 0 {
		return 0
	}
	in := iw * ih
	return in / ((a[2]-a[0])*(a[3]-a[1]) + (b[2]-b[0])*(b[3]-b[1]) - in)
}

// Params are score_threshold, nms_iou and max_results; score and overlap
// describe what the first two mean for the model.
func Params(score, overlap string) []modelconf.Param {
	return []modelconf.Param{
		{Key: "score_threshold", Kind: modelconf.Prob, Doc: score + ", 0..1"},
		{Key: "nms_iou", Kind: modelconf.Prob, Doc: overlap + ", 0..1"},
		{Key: "max_results", Kind: modelconf.Count, Min: 0, Max: MaxResults, Doc: "most results returned, 0 = all"},
	}
}
