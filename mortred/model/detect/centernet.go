package detect

import "fmt"

// centerNet is the [centernet] table of a centernet-head TOML: the
// heatmap output [1, grid, grid, classes] (sigmoid scores), the sizes
// output [1, grid, grid, 4] (the distances from the cell to the box's left,
// top, right and bottom sides, in input pixels) and the stride of a cell
// (grid = input_size / stride).
type centerNet struct {
	Heatmap string `toml:"heatmap"`
	Sizes   string `toml:"sizes"`
	Stride  int    `toml:"stride"`
}

// decode is CenterNet's peak extraction: a (cell, class) is a candidate
// when its score reaches threshold and no cell of its 3×3 neighbourhood
// scores higher for that class (the graph's own max-pool comparison); its
// box is the cell's corner (x·stride, y·stride) pushed out by the four
// distances, as the graph's decoder does.
func (cn centerNet) decode(heat, sizes []float32, input, nc int, threshold float64) ([]box, error) {
	g := input / cn.Stride
	if len(heat) != g*g*nc || len(sizes) != g*g*4 {
		return nil, fmt.Errorf("centernet outputs have %d scores and %d sizes, want %d and %d (grid %d, %d classes)",
			len(heat), len(sizes), g*g*nc, g*g*4, g, nc)
	}
	var out []box
	for y := range g {
		for x := range g {
			cell := y*g + x
			for k := range nc {
				s := heat[cell*nc+k]
				if float64(s) < threshold || !peak(heat, g, nc, x, y, k, s) {
					continue
				}
				d := sizes[cell*4 : cell*4+4]
				cx, cy := float64(x*cn.Stride), float64(y*cn.Stride)
				out = append(out, box{class: k, score: float64(s),
					b: [4]float64{cx - float64(d[0]), cy - float64(d[1]), cx + float64(d[2]), cy + float64(d[3])}})
			}
		}
	}
	return out, nil
}

// peak reports whether s, class k's score at (x, y), is the largest of its
// 3×3 neighbourhood within the grid.
func peak(heat []float32, g, nc, x, y, k int, s float32) bool {
	for dy := -1; dy <= 1; dy++ {
		for dx := -1; dx <= 1; dx++ {
			nx, ny := x+dx, y+dy
			if nx < 0 || ny < 0 || nx >= g || ny >= g {
				continue
			}
			if heat[(ny*g+nx)*nc+k] > s {
				return false
			}
		}
	}
	return true
}
