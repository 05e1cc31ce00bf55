package ppocr

import (
	"math"
	"sort"
)

// DBNet post-processing: the probability map becomes text boxes.
//
// The map is thresholded, 8-connected regions are found, each region's
// minimum-area rectangle is taken (so slanted lines get slanted boxes),
// scored by the region's mean probability, grown by area × ratio / perimeter
// ("unclip", DBNet's inverse of the shrink used in training) and scaled back
// to the source image.

// quad is a box's corners in source pixel coordinates: top-left, top-right,
// bottom-right, bottom-left.
type quad [4][2]float64

type textBox struct {
	poly  quad
	score float64
}

// detSettings are one item's thresholds (TOML values overridden by params).
type detSettings struct {
	thresh, boxThresh, unclipRatio float64
	minSize, maxCandidates         int
	maxResults                     int
}

// dbPost holds buffers reused across maps (one per instance: Run is never
// concurrent).
type dbPost struct {
	seen           []bool
	stack          []int32
	rowMin, rowMax []int32
	pts            [][2]float64
}

// boxes finds the text boxes in an h×w map whose rows are stride apart.
// sx, sy scale map coordinates to the source image of srcW×srcH.
func (p *dbPost) boxes(prob []float32, stride, h, w int, s detSettings, sx, sy float64, srcW, srcH int) []textBox {
	p.seen = grow(p.seen, h*w)
	clear(p.seen)
	p.rowMin = grow(p.rowMin, h)
	p.rowMax = grow(p.rowMax, h)
	for y := range h {
		p.rowMin[y], p.rowMax[y] = math.MaxInt32, -1
	}
	thr := float32(s.thresh)
	var out []textBox
	regions := 0
	for y0 := 0; y0 < h; y0++ {
		for x0 := 0; x0 < w; x0++ {
			if p.seen[y0*w+x0] || prob[y0*stride+x0] <= thr {
				continue
			}
			regions++
			if s.maxCandidates > 0 && regions > s.maxCandidates {
				return out
			}
			// Flood fill one region, keeping per-row extents for its hull.
			p.seen[y0*w+x0] = true
			p.stack = append(p.stack[:0], int32(y0*w+x0))
			var sum float64
			count, ymin, ymax := 0, y0, y0
			for len(p.stack) > 0 {
				i := int(p.stack[len(p.stack)-1])
				p.stack = p.stack[:len(p.stack)-1]
				y, x := i/w, i%w
				sum += float64(prob[y*stride+x])
				count++
				p.rowMin[y] = min(p.rowMin[y], int32(x))
				p.rowMax[y] = max(p.rowMax[y], int32(x))
				ymin, ymax = min(ymin, y), max(ymax, y)
				for dy := -1; dy <= 1; dy++ {
					for dx := -1; dx <= 1; dx++ {
						ny, nx := y+dy, x+dx
						if ny < 0 || ny >= h || nx < 0 || nx >= w {
							continue
						}
						j := ny*w + nx
						if !p.seen[j] && prob[ny*stride+nx] > thr {
							p.seen[j] = true
							p.stack = append(p.stack, int32(j))
						}
					}
				}
			}
			p.pts = p.pts[:0]
			for y := ymin; y <= ymax; y++ {
				if p.rowMax[y] >= 0 {
					l, r := float64(p.rowMin[y]), float64(p.rowMax[y]+1)
					p.pts = append(p.pts, [2]float64{l, float64(y)}, [2]float64{l, float64(y + 1)},
						[2]float64{r, float64(y)}, [2]float64{r, float64(y + 1)})
				}
				p.rowMin[y], p.rowMax[y] = math.MaxInt32, -1
			}
			score := sum / float64(count)
			if score < s.boxThresh {
				continue
			}
			c, u, v, bw, bh := minAreaRect(convexHull(p.pts))
			if math.Min(bw, bh) < float64(s.minSize) {
				continue
			}
			d := bw * bh * s.unclipRatio / (2 * (bw + bh))
			bw, bh = bw+2*d, bh+2*d
			if math.Min(bw, bh) < float64(s.minSize+2) {
				continue
			}
			var q quad
			for k, sg := range [4][2]float64{{-1, -1}, {1, -1}, {1, 1}, {-1, 1}} {
				x := c[0] + sg[0]*bw/2*u[0] + sg[1]*bh/2*v[0]
				y := c[1] + sg[0]*bw/2*u[1] + sg[1]*bh/2*v[1]
				q[k] = [2]float64{clampF(x*sx, 0, float64(srcW)), clampF(y*sy, 0, float64(srcH))}
			}
			out = append(out, textBox{poly: orderCorners(q), score: score})
		}
	}
	return out
}

// convexHull is Andrew's monotone chain; it reorders pts.
func convexHull(pts [][2]float64) [][2]float64 {
	sort.Slice(pts, func(i, j int) bool {
		if pts[i][0] != pts[j][0] {
			return pts[i][0] < pts[j][0]
		}
		return pts[i][1] < pts[j][1]
	})
	cross := func(o, a, b [2]float64) float64 {
		return (a[0]-o[0])*(b[1]-o[1]) - (a[1]-o[1])*(b[0]-o[0])
	}
	hull := make([][2]float64, 0, 2*len(pts))
	for _, pt := range pts {
		for len(hull) >= 2 && cross(hull[len(hull)-2], hull[len(hull)-1], pt) <= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, pt)
	}
	lower := len(hull) + 1
	for i := len(pts) - 2; i >= 0; i-- {
		for len(hull) >= lower && cross(hull[len(hull)-2], hull[len(hull)-1], pts[i]) <= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, pts[i])
	}
	return hull[:len(hull)-1]
}

// minAreaRect returns the smallest rectangle around a convex hull: its
// centre, unit axes u (along the width) and v, width and height. One of the
// rectangle's sides lies on a hull edge, so trying each edge suffices.
func minAreaRect(hull [][2]float64) (c, u, v [2]float64, w, h float64) {
	best := math.Inf(1)
	for i := range hull {
		a, b := hull[i], hull[(i+1)%len(hull)]
		ex, ey := b[0]-a[0], b[1]-a[1]
		n := math.Hypot(ex, ey)
		if n == 0 {
			continue
		}
		ux, uy := ex/n, ey/n
		// Make u point rightwards and v downwards: a text line's width runs
		// along u.
		if math.Abs(ux) < math.Abs(uy) {
			ux, uy = -uy, ux
		}
		if ux < 0 {
			ux, uy = -ux, -uy
		}
		vx, vy := -uy, ux
		lo0, hi0, lo1, hi1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		for _, pt := range hull {
			p0 := pt[0]*ux + pt[1]*uy
			p1 := pt[0]*vx + pt[1]*vy
			lo0, hi0 = math.Min(lo0, p0), math.Max(hi0, p0)
			lo1, hi1 = math.Min(lo1, p1), math.Max(hi1, p1)
		}
		if area := (hi0 - lo0) * (hi1 - lo1); area < best {
			best = area
			m0, m1 := (lo0+hi0)/2, (lo1+hi1)/2
			c = [2]float64{m0*ux + m1*vx, m0*uy + m1*vy}
			u, v = [2]float64{ux, uy}, [2]float64{vx, vy}
			w, h = hi0-lo0, hi1-lo1
		}
	}
	return c, u, v, w, h
}

// orderCorners puts corners in PaddleOCR's order: of the two leftmost
// points the upper is top-left, of the two rightmost the upper is top-right.
func orderCorners(q quad) quad {
	p := q
	sort.Slice(p[:], func(i, j int) bool { return p[i][0] < p[j][0] })
	tl, bl := p[0], p[1]
	if p[1][1] < p[0][1] {
		tl, bl = p[1], p[0]
	}
	tr, br := p[2], p[3]
	if p[3][1] < p[2][1] {
		tr, br = p[3], p[2]
	}
	return quad{tl, tr, br, bl}
}

// readingOrder sorts boxes top to bottom, and left to right within a line:
// two boxes whose tops are less than half a box height apart are on one line.
func readingOrder(boxes []textBox) {
	sort.SliceStable(boxes, func(i, j int) bool {
		a, b := boxes[i].poly[0], boxes[j].poly[0]
		if a[1] != b[1] {
			return a[1] < b[1]
		}
		return a[0] < b[0]
	})
	for i := 0; i+1 < len(boxes); i++ {
		for j := i; j >= 0; j-- {
			a, b := boxes[j], boxes[j+1]
			tol := math.Min(a.poly.height(), b.poly.height()) / 2
			if math.Abs(b.poly[0][1]-a.poly[0][1]) < tol && b.poly[0][0] < a.poly[0][0] {
				boxes[j], boxes[j+1] = b, a
			} else {
				break
			}
		}
	}
}

func (q quad) height() float64 { return math.Hypot(q[3][0]-q[0][0], q[3][1]-q[0][1]) }

// keepBest keeps the n highest-scoring boxes (all when n ≤ 0), in their
// original order.
func keepBest(boxes []textBox, n int) []textBox {
	if n <= 0 || len(boxes) <= n {
		return boxes
	}
	idx := make([]int, len(boxes))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return boxes[idx[a]].score > boxes[idx[b]].score })
	keep := idx[:n]
	sort.Ints(keep)
	out := make([]textBox, n)
	for i, k := range keep {
		out[i] = boxes[k]
	}
	return out
}

func clampF(x, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, x)) }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
