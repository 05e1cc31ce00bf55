package ppocr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

// recConfig is a "text_recognition" model TOML (a CTC recogniser).
type recConfig struct {
	base
	// Height is the line height fed to the model; default 48.
	Height int `toml:"height"`
	// MinWidth is the narrowest input, short lines are padded to it;
	// default 320 (PaddleOCR's).
	MinWidth int `toml:"min_width"`
	// MaxWidth caps a line's width; longer lines are squeezed; default 1600.
	MaxWidth int `toml:"max_width"`
	// WidthStep rounds input widths up to a multiple of it, so that only a
	// few shapes reach ONNX Runtime (its arena grows with every new shape);
	// default 64.
	WidthStep int `toml:"width_step"`
	// DictFile lists the characters, one per line; the model's classes are
	// blank, the dictionary, then a space when UseSpaceChar (default true).
	DictFile     string `toml:"dict_file"`
	UseSpaceChar *bool  `toml:"use_space_char"`
}

func (c *recConfig) validate() error {
	if c.Height == 0 {
		c.Height = 48
	}
	if c.MinWidth == 0 {
		c.MinWidth = 320
	}
	if c.MaxWidth == 0 {
		c.MaxWidth = 1600
	}
	if c.WidthStep == 0 {
		c.WidthStep = 64
	}
	if c.UseSpaceChar == nil {
		t := true
		c.UseSpaceChar = &t
	}
	errs := []error{c.base.validate()}
	if c.Height < 8 || c.MinWidth < 8 || c.MaxWidth < c.MinWidth || c.WidthStep < 1 {
		errs = append(errs, fmt.Errorf("height %d, min_width %d, max_width %d, width_step %d: want height ≥ 8, 8 ≤ min_width ≤ max_width, width_step ≥ 1",
			c.Height, c.MinWidth, c.MaxWidth, c.WidthStep))
	}
	if c.DictFile == "" {
		errs = append(errs, errors.New("dict_file is required"))
	}
	return errors.Join(errs...)
}

// Text is the recognition payload.
type Text struct {
	Text  string  `json:"text"`
	Score float32 `json:"score"`
}

// recognizer is the session and buffers of one text_recognition instance.
type recognizer struct {
	cfg   *recConfig
	chars []string // class index → text; 0 is the CTC blank
	sess  *ort.Session
	batch ort.Batch
}

// line is a prepared line: resized to the model's height, and the padded
// width it is fed at.
type line struct {
	img   *imageio.RGB
	width int
}

func newRecognizer(path string, opts ortOptions) (*recognizer, error) {
	cfg := &recConfig{}
	if err := load(path, cfg); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	dict, err := readLines(cfg.path(cfg.DictFile))
	if err != nil {
		return nil, err
	}
	chars := append([]string{""}, dict...)
	if *cfg.UseSpaceChar {
		chars = append(chars, " ")
	}
	sess, err := cfg.session(opts)
	if err != nil {
		return nil, err
	}
	r := &recognizer{cfg: cfg, chars: chars, sess: sess}
	out, err := sess.Run(context.Background(), []ort.Tensor{r.batch.Reset(1, 3, cfg.Height, cfg.MinWidth)})
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("model %s: warm-up run: %v", cfg.ModelFile, err)
	}
	if sh := out[0].Shape; len(sh) != 3 || int(sh[2]) != len(chars) {
		sess.Close()
		return nil, fmt.Errorf("model %s: output shape %v does not match %d classes (blank + %d lines of %s%s)",
			cfg.ModelFile, sh, len(chars), len(dict), cfg.DictFile, map[bool]string{true: " + space", false: ""}[*cfg.UseSpaceChar])
	}
	return r, nil
}

func (r *recognizer) prepare(img *imageio.RGB) line {
	w := lineWidth(img, r.cfg.Height, r.cfg.MaxWidth)
	return line{
		img:   img.Resize(w, r.cfg.Height),
		width: min(max(r.cfg.MinWidth, roundUp(w, r.cfg.WidthStep)), r.cfg.MaxWidth),
	}
}

// run recognises prepared lines. Lines are fed together only when they have
// the same padded width: padding a short line to a long neighbour changes
// what the model reads (ppocr-notes), and this way a line's result does not
// depend on its batch mates.
func (r *recognizer) run(ctx context.Context, lines []line) ([]Text, error) {
	out := make([]Text, len(lines))
	groups := map[int][]int{}
	var widths []int
	for i, l := range lines {
		if _, ok := groups[l.width]; !ok {
			widths = append(widths, l.width)
		}
		groups[l.width] = append(groups[l.width], i)
	}
	for _, w := range widths {
		idx := groups[w]
		for start := 0; start < len(idx); start += r.cfg.MaxBatch {
			chunk := idx[start:min(start+r.cfg.MaxBatch, len(idx))]
			in := r.batch.Reset(len(chunk), 3, r.cfg.Height, w)
			for k, i := range chunk {
				r.cfg.norm.Planes(lines[i].img, in.Item(k), r.cfg.Height, w)
			}
			res, err := r.sess.Run(ctx, []ort.Tensor{in})
			if err != nil {
				return nil, err
			}
			sh := res[0].Shape
			if len(sh) != 3 || int(sh[0]) != len(chunk) || int(sh[2]) != len(r.chars) {
				return nil, fmt.Errorf("model %s: output shape %v, want [%d,T,%d]", r.cfg.ModelFile, sh, len(chunk), len(r.chars))
			}
			steps, classes := int(sh[1]), int(sh[2])
			for k, i := range chunk {
				out[i] = r.decode(res[0].Data[k*steps*classes:(k+1)*steps*classes], steps, classes)
			}
		}
	}
	return out, nil
}

// decode is greedy CTC: the best class per step, repeats collapsed, blanks
// dropped; the score is the mean probability of the kept steps.
func (r *recognizer) decode(probs []float32, steps, classes int) Text {
	var sb strings.Builder
	var sum float64
	kept, prev := 0, -1
	for t := 0; t < steps; t++ {
		row := probs[t*classes : (t+1)*classes]
		best := 0
		for c := 1; c < classes; c++ {
			if row[c] > row[best] {
				best = c
			}
		}
		if best != 0 && best != prev {
			sb.WriteString(r.chars[best])
			sum += float64(row[best])
			kept++
		}
		prev = best
	}
	if kept == 0 {
		return Text{}
	}
	return Text{Text: strings.TrimSpace(sb.String()), Score: float32(sum / float64(kept))}
}

// Recognition serves a recogniser as a model.Model: one image is one line.
type Recognition struct {
	r *recognizer
}

func newRecognition(path string, opts model.Options) (model.Model, error) {
	if err := ort.Init(opts.ORTLib); err != nil {
		return nil, err
	}
	r, err := newRecognizer(path, ortOptions{threads: opts.IntraOpThreads})
	if err != nil {
		return nil, err
	}
	return &Recognition{r: r}, nil
}

// Info implements model.Model.
func (m *Recognition) Info() model.Info { return info(&m.r.cfg.base, "text_recognition") }

// ValidateParams implements model.Model: recognition takes no params.
func (m *Recognition) ValidateParams(p map[string]json.RawMessage) []model.FieldError {
	_, errs := parseParams("text_recognition", noParams, p)
	return errs
}

// Prepare implements model.Model.
func (m *Recognition) Prepare(image []byte, p map[string]json.RawMessage) (model.Input, error) {
	if _, errs := parseParams("text_recognition", noParams, p); errs != nil {
		return nil, invalidParams(errs)
	}
	img, err := imageio.Decode(image, m.r.cfg.MaxPixels)
	if err != nil {
		return nil, err
	}
	return m.r.prepare(img), nil
}

// Run implements model.Model.
func (m *Recognition) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	lines := make([]line, len(batch))
	for i, in := range batch {
		l, ok := in.(line)
		if !ok {
			return nil, fmt.Errorf("text_recognition: item %d was not prepared by this model (%T)", i, in)
		}
		lines[i] = l
	}
	texts, err := m.r.run(ctx, lines)
	if err != nil {
		return nil, err
	}
	out := make([]model.Result, len(texts))
	for i, t := range texts {
		out[i] = model.Result{Data: t}
	}
	return out, nil
}

// Close implements model.Model.
func (m *Recognition) Close() error { return m.r.sess.Close() }

var _ model.Model = (*Recognition)(nil)
