package ctl

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"strconv"
	"strings"
)

// describeData prints a payload as a person reads it, recognised by its
// shape: class scores as bars, detections and faces as labelled boxes (with
// the face keypoints), a mask as its box, coverage and a coarse picture,
// an upscaled image as its size, OCR lines as text; anything else as
// indented JSON.
func describeData(c *CLI, data json.RawMessage) {
	var list []map[string]json.RawMessage
	var obj map[string]json.RawMessage
	switch {
	case json.Unmarshal(data, &list) == nil && len(list) > 0:
		if describeList(c, data, list[0]) {
			return
		}
	case json.Unmarshal(data, &obj) == nil && obj != nil:
		if has(obj, "scores", "class_id") && describeClasses(c, data) {
			return
		}
		if has(obj, "mask", "width", "height") && describeMask(c, data) {
			return
		}
		if has(obj, "image", "width", "height", "scale") && describeUpscaled(c, data) {
			return
		}
	}
	var buf strings.Builder
	_ = printJSON(&buf, data)
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		fmt.Fprintln(c.Out, "  "+l)
	}
}

func has(m map[string]json.RawMessage, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

func boxText(b []float64) string {
	parts := make([]string, len(b))
	for i, v := range b {
		parts[i] = strconv.FormatFloat(v, 'f', 0, 64)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// keypointNames are BlazeFace's, in its order.
var keypointNames = []string{"right eye", "left eye", "nose tip", "mouth", "right ear", "left ear"}

func describeList(c *CLI, data json.RawMessage, first map[string]json.RawMessage) bool {
	var items []struct {
		Text      *string      `json:"text"`
		Category  *string      `json:"category"`
		Score     float64      `json:"score"`
		BBox      []float64    `json:"bbox"`
		Keypoints [][2]float64 `json:"keypoints"`
	}
	if _, ok := first["bbox"]; !ok || json.Unmarshal(data, &items) != nil {
		return false
	}
	for _, it := range items {
		switch {
		case it.Keypoints != nil:
			fmt.Fprintf(c.Out, "  face      %.3f  box %s\n", it.Score, boxText(it.BBox))
			var kp []string
			for i, p := range it.Keypoints {
				name := fmt.Sprintf("point %d", i)
				if i < len(keypointNames) {
					name = keypointNames[i]
				}
				kp = append(kp, fmt.Sprintf("%s (%.0f, %.0f)", name, p[0], p[1]))
			}
			fmt.Fprintf(c.Out, "    %s\n", strings.Join(kp, ", "))
		case it.Text != nil:
			fmt.Fprintf(c.Out, "  %-40s score %.3f  bbox %s\n", strconv.Quote(*it.Text), it.Score, boxText(it.BBox))
		case it.Category != nil:
			fmt.Fprintf(c.Out, "  %-14s %.3f  box %s\n", *it.Category, it.Score, boxText(it.BBox))
		default:
			fmt.Fprintf(c.Out, "  box %s score %.3f\n", boxText(it.BBox), it.Score)
		}
	}
	return true
}

// barWidth is the width of a score of 1 in describeClasses.
const barWidth = 30

func describeClasses(c *CLI, data json.RawMessage) bool {
	var cl struct {
		ClassID  int       `json:"class_id"`
		Category string    `json:"category"`
		Scores   []float64 `json:"scores"`
		Top      []struct {
			ClassID  int    `json:"class_id"`
			Category string `json:"category"`
		} `json:"top"`
	}
	if json.Unmarshal(data, &cl) != nil {
		return false
	}
	// The payload names the best class and those of its top list; the
	// others go by index.
	names := map[int]string{cl.ClassID: cl.Category}
	for _, t := range cl.Top {
		names[t.ClassID] = t.Category
	}
	fmt.Fprintf(c.Out, "  %s (class %d)\n", cl.Category, cl.ClassID)
	for i, s := range cl.Scores {
		mark := " "
		if i == cl.ClassID {
			mark = ">"
		}
		n := int(s*barWidth + 0.5)
		n = max(0, min(barWidth, n))
		line := fmt.Sprintf("  %s %3d %-*s %.3f", mark, i, barWidth, strings.Repeat("█", n), s)
		if name, ok := names[i]; ok && len(cl.Top) > 0 {
			line += "  " + name
		}
		fmt.Fprintln(c.Out, line)
	}
	return true
}

// maskCols is the width of the coarse mask picture, in characters.
const maskCols = 48

func describeMask(c *CLI, data json.RawMessage) bool {
	var s struct {
		Mask     string    `json:"mask"`
		Width    int       `json:"width"`
		Height   int       `json:"height"`
		BBox     []float64 `json:"bbox"`
		Coverage float64   `json:"coverage"`
	}
	if json.Unmarshal(data, &s) != nil {
		return false
	}
	fmt.Fprintf(c.Out, "  mask %d×%d, coverage %.1f%%, box %s\n", s.Width, s.Height, 100*s.Coverage, boxText(s.BBox))
	raw, err := base64.StdEncoding.DecodeString(s.Mask)
	if err != nil {
		return true
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return true
	}
	// Characters are about twice as tall as wide: half as many rows.
	b := img.Bounds()
	cols := min(maskCols, b.Dx())
	rows := max(1, cols*b.Dy()/b.Dx()/2)
	for r := range rows {
		var line strings.Builder
		for col := range cols {
			x := b.Min.X + (2*col+1)*b.Dx()/(2*cols)
			y := b.Min.Y + (2*r+1)*b.Dy()/(2*rows)
			if g, _, _, _ := img.At(x, y).RGBA(); g >= 0x8000 {
				line.WriteByte('#')
			} else {
				line.WriteByte('.')
			}
		}
		fmt.Fprintf(c.Out, "    %s\n", line.String())
	}
	return true
}

func describeUpscaled(c *CLI, data json.RawMessage) bool {
	var s struct {
		Image  string `json:"image"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
		Scale  int    `json:"scale"`
	}
	if json.Unmarshal(data, &s) != nil {
		return false
	}
	fmt.Fprintf(c.Out, "  upscaled ×%d to %d×%d (PNG, %d bytes; --json has it in base64)\n", s.Scale, s.Width, s.Height, base64.StdEncoding.DecodedLen(len(s.Image)))
	return true
}
