package streams

import (
	"strings"
	"testing"
)

func TestFloorNote(t *testing.T) {
	cases := []struct {
		router, floor float64
		want          []string
	}{
		// The router near the library, both over the target.
		{47800, 46600, []string{"floor holds 45.5 KiB", "router 46.7 KiB", "within 5%", "already hold more than 40 KiB"}},
		// The router well above a library that leaves room.
		{47800, 30720, []string{"16.7 KiB (56%) of its own", "leaves room for 40 KiB"}},
		{30720, 42000, []string{"11.0 KiB less than this plain use", "already hold more than 40 KiB"}},
	}
	for _, c := range cases {
		got := FloorNote(c.router, c.floor, true, true)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("FloorNote(%v, %v) = %q, want it to contain %q", c.router, c.floor, got, w)
			}
		}
	}
	if got := FloorNote(47800, 46600, false, true); got != "" {
		t.Errorf("router opened nothing: FloorNote = %q, want empty", got)
	}
	if got := FloorNote(47800, 46600, true, false); got != "" {
		t.Errorf("floor opened nothing: FloorNote = %q, want empty", got)
	}
}
