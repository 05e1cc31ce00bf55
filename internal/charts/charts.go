// Package charts is the small SVG charting script (and its style) that the
// router's status page and the supervisor's UI share, with the formatting
// of per-key usage (KeyUsage) that both pages' Keys sections use. Each page is one
// embedded HTML file; Inline puts the script and style into it where the
// page marks their place, so both pages draw with one piece of code and
// still load nothing but their own document.
//
// Hand-drawn SVG instead of a vendored library (uPlot is ~50 KB minified):
// the pages need lines with gaps, a scale and a legend — a few hundred
// lines of code that need no vendoring, and SVG paths that a browser test
// can read back point by point.
package charts

import (
	"bytes"
	_ "embed"
	"fmt"
)

//go:embed charts.js
var chartsJS []byte

//go:embed keyusage.js
var keyUsageJS []byte

var script = append(append([]byte(nil), chartsJS...), keyUsageJS...)

//go:embed charts.css
var style []byte

// The markers a page writes where the style and the script go.
const (
	StyleMarker  = "/*charts.css*/"
	ScriptMarker = "/*charts.js*/"
)

// Inline returns page with the charts' style and script in place of the
// markers; it panics when a marker is missing (an embedded page is fixed at
// build time, and its tests load it).
func Inline(page []byte) []byte {
	for _, r := range []struct {
		marker string
		with   []byte
	}{{StyleMarker, style}, {ScriptMarker, script}} {
		if bytes.Count(page, []byte(r.marker)) != 1 {
			panic(fmt.Sprintf("charts: the page must hold %s exactly once", r.marker))
		}
		page = bytes.Replace(page, []byte(r.marker), r.with, 1)
	}
	return page
}
