package freeport

import "testing"

// TestDistinct asks for many ports, as a big test does, and wants no port
// twice and none where the kernel hands out ephemeral ports: two model
// servers of one test were once told the same port.
func TestDistinct(t *testing.T) {
	seen := map[int]bool{}
	for i := range 300 {
		get := TCP
		if i%2 == 1 {
			get = UDP
		}
		p, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if low := ephemeralLow(); low >= 11000 && (p >= low || p < 10000) {
			t.Fatalf("port %d is outside [10000, %d)", p, low)
		}
	}
}
