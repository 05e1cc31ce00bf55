// Package boxes is what the box-answering model types share: the overlap
// measure their NMS uses and their common request params.
package boxes

import (
	"fmt"
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

// Defaults are a box model TOML's score_threshold, nms_iou and
// max_results (embedded in its config): the values of the params a request
// leaves out.
type Defaults struct {
	ScoreThreshold float64 `toml:"score_threshold"`
	NMSIoU         float64 `toml:"nms_iou"`
	MaxResults     int     `toml:"max_results"`
}

// Check is nil when the defaults are in the ranges Params accepts.
func (d Defaults) Check() error {
	if d.ScoreThreshold < 0 || d.ScoreThreshold > 1 || d.NMSIoU < 0 || d.NMSIoU > 1 || d.MaxResults < 0 || d.MaxResults > MaxResults {
		return fmt.Errorf("score_threshold %v, nms_iou %v (0..1) or max_results %d (0..%d) out of range",
			d.ScoreThreshold, d.NMSIoU, d.MaxResults, MaxResults)
	}
	return nil
}

// Request is what one item asked for: the parsed Params over the defaults.
type Request struct {
	Score, IoU float64
	Limit      int // 0: all
}

// Request is the item's values of Params (parsed by modelconf), the
// defaults where it set none.
func (d Defaults) Request(v modelconf.Values) Request {
	return Request{Score: v.Float("score_threshold", d.ScoreThreshold), IoU: v.Float("nms_iou", d.NMSIoU),
		Limit: v.Int("max_results", d.MaxResults)}
}
