package textimg

import "image"

// The golden texts: English words and digits, which PP-OCRv4 (Chinese and
// English) reads reliably.
const (
	TextMortred = "Mortred 42"
	TextHello   = "HELLO WORLD 2026"
	TextServe   = "serving 7 models"
	TextFront   = "Frontdoor 99"
)

// PageLines are the lines of the "page" image, in reading order; the third
// is drawn upside down.
var PageLines = []Placed{
	{Text: TextHello, At: image.Pt(40, 30), Size: 32},
	{Text: TextMortred, At: image.Pt(40, 110), Size: 32},
	{Text: TextServe, At: image.Pt(40, 190), Size: 32, Rotate180: true},
	{Text: TextFront, At: image.Pt(40, 270), Size: 32},
}

// Golden returns every golden image by name: single lines, the upside-down
// line, and the page.
func Golden() map[string]*image.RGBA {
	return map[string]*image.RGBA{
		"line_mortred":     Line(TextMortred, 32, 6),
		"line_hello":       Line(TextHello, 32, 6),
		"line_serve":       Line(TextServe, 32, 6),
		"line_front":       Line(TextFront, 32, 6),
		"line_hello_180":   Rotate180(Line(TextHello, 32, 6)),
		"line_mortred_180": Rotate180(Line(TextMortred, 32, 6)),
		"page":             Page(480, 340, PageLines),
	}
}
