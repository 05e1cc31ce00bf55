package gateway

import (
	"strings"
	"testing"
)

func TestFloorNote(t *testing.T) {
	cases := []struct {
		gw, floor, gwCPU, floorCPU float64
		want                       []string
	}{
		{0.91, 0.93, 61.2, 48.5, []string{"floor reaches 0.93× direct spending 48.5 µs", "gateway 0.91× spending 61.2 µs (12.7 µs more: its own work",
			"stays under 0.95×", "net/http and http.Transport"}},
		{0.91, 0.97, 38, 40, []string{"floor reaches 0.97×", "(2.0 µs less than the floor)", "reaches 0.95× here: what the gateway falls short by is its own"}},
	}
	for _, c := range cases {
		got := FloorNote(c.gw, c.floor, c.gwCPU, c.floorCPU)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("FloorNote(%v, %v, %v, %v) = %q, want it to contain %q", c.gw, c.floor, c.gwCPU, c.floorCPU, got, w)
			}
		}
	}
	for _, missing := range [][4]float64{{0, 0.9, 1, 1}, {0.9, 0, 1, 1}, {0.9, 0.9, 0, 1}, {0.9, 0.9, 1, 0}} {
		if got := FloorNote(missing[0], missing[1], missing[2], missing[3]); got != "" {
			t.Errorf("FloorNote(%v) = %q, want empty when a figure is missing", missing, got)
		}
	}
}

// Every path's name makes a file name of one component: wrk's script is
// written under it.
func TestFileName(t *testing.T) {
	for n, want := range map[string]string{"direct": "direct", gwOwn: "gateway-own-core", floorA: "net-http-floor", floorOwn: "net-http-floor-own-core"} {
		if got := fileName(n); got != want {
			t.Errorf("fileName(%q) = %q, want %q", n, got, want)
		}
	}
}
