package router

import "fmt"

// cpuTarget is issue 17's goal: router CPU per small request at most
// this many times Nginx's.
const cpuTarget = 2.5

// FloorNote says in words what the floor row means for the router's CPU
// per request: how much of it the library alone costs, and whether the
// library leaves room for the target at all. It is "" when a figure is
// missing.
func FloorNote(router, floor, nginx float64) string {
	if router <= 0 || floor <= 0 || nginx <= 0 {
		return ""
	}
	s := fmt.Sprintf("The net/http floor alone spends %.1f µs of CPU per request, %.2f× Nginx's %.1f µs; the router spends %.1f µs (%.2f×), ",
		floor, floor/nginx, nginx, router, router/nginx)
	switch d := router - floor; {
	case d > 0.05*floor:
		s += fmt.Sprintf("%.1f µs (%.0f%%) of its own work on top of the library. ", d, 100*d/floor)
	case d < -0.05*floor:
		s += fmt.Sprintf("%.1f µs less than this plain use of the library. ", -d)
	default:
		s += "within 5% of the library's own cost. "
	}
	if floor/nginx > cpuTarget {
		return s + fmt.Sprintf("So what limits the router's CPU per request is net/http and http.Transport themselves: "+
			"used plainly they already cost more than %.1f× Nginx on this machine, so the target needs the library's own cost per request to fall, "+
			"not only the router's.", cpuTarget)
	}
	return s + fmt.Sprintf("The library leaves room for %.1f× Nginx; what the router spends beyond that is its own.", cpuTarget)
}
