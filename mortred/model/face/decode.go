package face

import (
	"math"
	"sort"

	"github.com/fe64bb06/frontdoor/mortred/model/boxes"
)

// keypoints per face in BlazeFace's box output (after centre and size).
const keypoints = 6

// candidate is one decoded anchor, in the model's normalised input frame
// (0..1 over the square input).
type candidate struct {
	score  float64
	cx, cy float64
	w, h   float64
	kp     [keypoints][2]float64
}

func (c *candidate) box() [4]float64 {
	return [4]float64{c.cx - c.w/2, c.cy - c.h/2, c.cx + c.w/2, c.cy + c.h/2}
}

// decodeGrid appends the candidates of one anchor grid above threshold.
// scores holds one logit per anchor, boxes 4+2·keypoints values per anchor,
// anchors ordered cell by cell (row-major), then anchor within the cell.
// Offsets are in input pixels relative to the anchor's cell centre, so
// dividing by the input size puts them in the normalised frame.
func decodeGrid(out []candidate, g grid, scores, boxes []float32, size int, threshold float64) []candidate {
	per := 4 + 2*keypoints
	inv := 1 / float64(size)
	for i := range g.Cells * g.Cells * g.Anchors {
		logit := math.Max(-100, math.Min(100, float64(scores[i])))
		s := 1 / (1 + math.Exp(-logit))
		if s < threshold {
			continue
		}
		cell := i / g.Anchors
		ax := (float64(cell%g.Cells) + 0.5) / float64(g.Cells)
		ay := (float64(cell/g.Cells) + 0.5) / float64(g.Cells)
		b := boxes[i*per : (i+1)*per]
		c := candidate{score: s,
			cx: ax + float64(b[0])*inv, cy: ay + float64(b[1])*inv,
			w: float64(b[2]) * inv, h: float64(b[3]) * inv}
		if c.w <= 0 || c.h <= 0 {
			continue
		}
		for k := range keypoints {
			c.kp[k] = [2]float64{ax + float64(b[4+2*k])*inv, ay + float64(b[5+2*k])*inv}
		}
		out = append(out, c)
	}
	return out
}

// weightedNMS is MediaPipe's blending suppression: the best remaining
// candidate and every other one overlapping it by at least iouThresh become
// one face whose box and keypoints are their score-weighted mean and whose
// score is the best one's. A face found by many neighbouring anchors gets a
// steadier box than plain NMS gives.
func weightedNMS(cands []candidate, iouThresh float64) []candidate {
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].score > cands[j].score })
	used := make([]bool, len(cands))
	var out []candidate
	for i := range cands {
		if used[i] {
			continue
		}
		top := cands[i].box()
		var acc candidate
		var wsum float64
		for j := i; j < len(cands); j++ {
			if used[j] || (j != i && boxes.IoU(top, cands[j].box()) < iouThresh) {
				continue
			}
			used[j] = true
			c, w := &cands[j], cands[j].score
			wsum += w
			acc.cx += c.cx * w
			acc.cy += c.cy * w
			acc.w += c.w * w
			acc.h += c.h * w
			for k := range keypoints {
				acc.kp[k][0] += c.kp[k][0] * w
				acc.kp[k][1] += c.kp[k][1] * w
			}
		}
		acc.cx, acc.cy, acc.w, acc.h = acc.cx/wsum, acc.cy/wsum, acc.w/wsum, acc.h/wsum
		for k := range keypoints {
			acc.kp[k][0] /= wsum
			acc.kp[k][1] /= wsum
		}
		acc.score = cands[i].score
		out = append(out, acc)
	}
	return out
}

// letterbox is how an image sits in the square model input: scaled by s
// and offset by (ox, oy) input pixels, the rest padded.
type letterbox struct {
	s, ox, oy float64
	w, h      int // the original image
}

// toImage maps a normalised input-frame point to original image pixels,
// clamped to the image.
func (l letterbox) toImage(x, y float64, size int) (float64, float64) {
	px := (x*float64(size) - l.ox) / l.s
	py := (y*float64(size) - l.oy) / l.s
	return math.Max(0, math.Min(float64(l.w), px)), math.Max(0, math.Min(float64(l.h), py))
}
