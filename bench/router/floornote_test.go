package router

import (
	"strings"
	"testing"
)

func TestFloorNote(t *testing.T) {
	cases := []struct {
		router, floor, nginx float64
		want                 []string
	}{
		// The colleague's figures: the library alone is over the target.
		{52.36, 53.65, 14.85, []string{"53.6 µs", "3.61× Nginx's 14.8 µs", "router spends 52.4 µs (3.53×)",
			"within 5% of the library", "net/http and http.Transport themselves", "2.5× Nginx"}},
		{80, 50, 15, []string{"30.0 µs (60%) of its own work", "net/http and http.Transport themselves"}},
		{40, 50, 25, []string{"10.0 µs less than this plain use", "2.00× Nginx's", "leaves room for 2.5× Nginx"}},
	}
	for _, c := range cases {
		got := FloorNote(c.router, c.floor, c.nginx)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("FloorNote(%v, %v, %v) = %q, want it to contain %q", c.router, c.floor, c.nginx, got, w)
			}
		}
	}
	for _, missing := range [][3]float64{{0, 50, 15}, {50, 0, 15}, {50, 50, 0}} {
		if got := FloorNote(missing[0], missing[1], missing[2]); got != "" {
			t.Errorf("FloorNote(%v) = %q, want empty when a figure is missing", missing, got)
		}
	}
}
