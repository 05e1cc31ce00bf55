package boxes

import "testing"

func TestIoU(t *testing.T) {
	for _, c := range []struct {
		a, b [4]float64
		want float64
	}{
		{[4]float64{0, 0, 2, 2}, [4]float64{0, 0, 2, 2}, 1},
		{[4]float64{0, 0, 2, 2}, [4]float64{1, 0, 3, 2}, 2.0 / 6},
		{[4]float64{0, 0, 2, 2}, [4]float64{2, 0, 4, 2}, 0}, // touching
		{[4]float64{0, 0, 1, 1}, [4]float64{5, 5, 6, 6}, 0},
	} {
		if got := IoU(c.a, c.b); got != c.want {
			t.Errorf("IoU(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if p := Params("s", "o"); len(p) != 3 || p[2].Max != MaxResults || p[0].Doc != "s, 0..1" {
		t.Errorf("%+v", p)
	}
}
