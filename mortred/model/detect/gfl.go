package detect

import (
	"fmt"
	"math"

	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

// decodeGFL reads NanoDet's outputs (two per level: class scores and box
// bins) into candidates in input-square pixels.
func (m *Model) decodeGFL(res []ort.Tensor, threshold float64) ([]box, error) {
	size, nc, bins := m.cfg.InputSize, len(m.cfg.Labels), m.cfg.RegMax+1
	var cands []box
	for li, l := range m.cfg.Levels {
		grid := size / l.Stride
		scores, dists := res[2*li].Data, res[2*li+1].Data
		if len(scores) != grid*grid*nc || len(dists) != grid*grid*4*bins {
			return nil, fmt.Errorf("level %d (stride %d): outputs have %d scores and %d box values, want %d and %d",
				li, l.Stride, len(scores), len(dists), grid*grid*nc, grid*grid*4*bins)
		}
		cands = decodeLevel(cands, scores, dists, grid, l.Stride, nc, bins, threshold)
	}
	return cands, nil
}

// decodeLevel appends one level's candidates: every class of every cell
// scoring at least threshold, with the cell's box.
func decodeLevel(out []box, scores, dists []float32, grid, stride, nc, bins int, threshold float64) []box {
	for cell := range grid * grid {
		row := scores[cell*nc : (cell+1)*nc]
		var b [4]float64
		decoded := false
		for k, s := range row {
			if float64(s) < threshold {
				continue
			}
			if !decoded {
				cx := (float64(cell%grid) + 0.5) * float64(stride)
				cy := (float64(cell/grid) + 0.5) * float64(stride)
				var d [4]float64
				for side := range 4 {
					d[side] = expectation(dists[(cell*4+side)*bins:(cell*4+side+1)*bins]) * float64(stride)
				}
				b = [4]float64{cx - d[0], cy - d[1], cx + d[2], cy + d[3]}
				decoded = true
			}
			out = append(out, box{class: k, score: float64(s), b: b})
		}
	}
	return out
}

// expectation is the mean bin index under softmax(logits).
func expectation(logits []float32) float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = math.Max(m, float64(v))
	}
	var sum, mean float64
	for i, v := range logits {
		e := math.Exp(float64(v) - m)
		sum += e
		mean += e * float64(i)
	}
	return mean / sum
}
