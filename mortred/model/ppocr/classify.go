package ppocr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

// classConfig is a "classification" model TOML.
type classConfig struct {
	base
	// InputSize is [channels, height, width]; channels must be 3.
	InputSize []int `toml:"input_size"`
	// Resize is "stretch" (default: to exactly height×width) or
	// "keep_ratio_pad" (to height, keeping the aspect ratio, width capped
	// and padded right: the PP-OCR direction classifier).
	Resize string `toml:"resize"`
	// Labels name the classes in output order; or LabelFile, one per line.
	Labels    []string `toml:"labels"`
	LabelFile string   `toml:"label_file"`
	// Output is "probabilities" (the graph ends in softmax; default) or
	// "logits" (softmax is applied here).
	Output string `toml:"output"`
	// Defaults of the request params: TopK classes (0: all of them) at
	// or above ScoreThreshold go into the answer's top list.
	TopK           int     `toml:"top_k"`
	ScoreThreshold float64 `toml:"score_threshold"`
}

func (c *classConfig) validate() error {
	errs := []error{c.base.validate()}
	if len(c.InputSize) != 3 || c.InputSize[0] != 3 || c.InputSize[1] <= 0 || c.InputSize[2] <= 0 {
		errs = append(errs, fmt.Errorf("input_size %v: want [3, height, width]", c.InputSize))
	}
	if c.Resize == "" {
		c.Resize = "stretch"
	}
	if c.Resize != "stretch" && c.Resize != "keep_ratio_pad" {
		errs = append(errs, fmt.Errorf("resize %q: want stretch or keep_ratio_pad", c.Resize))
	}
	if c.Output == "" {
		c.Output = "probabilities"
	}
	if c.Output != "probabilities" && c.Output != "logits" {
		errs = append(errs, fmt.Errorf("output %q: want probabilities or logits", c.Output))
	}
	if (len(c.Labels) == 0) == (c.LabelFile == "") {
		errs = append(errs, errors.New("give exactly one of labels or label_file"))
	}
	if c.TopK < 0 || c.ScoreThreshold < 0 || c.ScoreThreshold > 1 {
		errs = append(errs, fmt.Errorf("top_k %d (≥ 0, 0 = every class) or score_threshold %v (0..1) out of range", c.TopK, c.ScoreThreshold))
	}
	return errors.Join(errs...)
}

// Class is the classification payload (envelope.Classification, with the
// scores as the graph gives them).
type Class struct {
	ClassID  int        `json:"class_id"`
	Category string     `json:"category"`
	Scores   []float32  `json:"scores"`
	Top      []TopClass `json:"top"`
}

// TopClass is one class of Class.Top (envelope.ClassScore).
type TopClass struct {
	ClassID  int     `json:"class_id"`
	Category string  `json:"category"`
	Score    float32 `json:"score"`
}

// top is the best k classes of scores at or above thresh, best first (the
// lower class id first among equal scores); never nil, so the answer
// always carries the list.
func top(scores []float32, labels []string, k int, thresh float64) []TopClass {
	ids := make([]int, len(scores))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return scores[ids[a]] > scores[ids[b]] })
	out := make([]TopClass, 0, k)
	for _, id := range ids[:min(k, len(ids))] {
		if float64(scores[id]) < thresh {
			break
		}
		out = append(out, TopClass{ClassID: id, Category: labels[id], Score: scores[id]})
	}
	return out
}

// classifier is the session and buffers of one classification instance.
type classifier struct {
	cfg    *classConfig
	labels []string
	sess   *ort.Session
	batch  ort.Batch
	h, w   int
}

func newClassifier(path string, opts ortOptions) (*classifier, error) {
	cfg := &classConfig{}
	if err := load(path, cfg); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	labels := cfg.Labels
	if cfg.LabelFile != "" {
		var err error
		if labels, err = readLines(cfg.path(cfg.LabelFile)); err != nil {
			return nil, err
		}
	}
	if cfg.TopK > len(labels) {
		return nil, fmt.Errorf("model config %s: top_k %d is more than the %d classes", path, cfg.TopK, len(labels))
	}
	if cfg.TopK == 0 {
		cfg.TopK = len(labels)
	}
	sess, err := cfg.session(opts)
	if err != nil {
		return nil, err
	}
	c := &classifier{cfg: cfg, labels: labels, sess: sess, h: cfg.InputSize[1], w: cfg.InputSize[2]}
	// A warm-up run loads the kernels before the first request, and checks
	// the label count against the model.
	out, err := c.sess.Run(context.Background(), []ort.Tensor{c.batch.Reset(1, 3, c.h, c.w)})
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("model %s: warm-up run: %v", cfg.ModelFile, err)
	}
	if sh := out[0].Shape; len(sh) != 2 || int(sh[1]) != len(labels) {
		sess.Close()
		return nil, fmt.Errorf("model %s: output shape %v does not match the %d labels of %s", cfg.ModelFile, sh, len(labels), path)
	}
	return c, nil
}

// prepare resizes img to the model's input; the result is padded (or not)
// when packed.
func (c *classifier) prepare(img *imageio.RGB) *imageio.RGB {
	if c.cfg.Resize == "stretch" {
		return img.Resize(c.w, c.h)
	}
	return img.Resize(lineWidth(img, c.h, c.w), c.h)
}

// run classifies prepared images, in runs of at most max_batch. The input is
// always [n,3,H,W] whatever the images, so batched and single results agree.
func (c *classifier) run(ctx context.Context, imgs []*imageio.RGB) ([]Class, error) {
	out := make([]Class, 0, len(imgs))
	for start := 0; start < len(imgs); start += c.cfg.MaxBatch {
		chunk := imgs[start:min(start+c.cfg.MaxBatch, len(imgs))]
		in := c.batch.Reset(len(chunk), 3, c.h, c.w)
		for i, img := range chunk {
			c.cfg.norm.Planes(img, in.Item(i), c.h, c.w)
		}
		res, err := c.sess.Run(ctx, []ort.Tensor{in})
		if err != nil {
			return nil, err
		}
		n := len(c.labels)
		if len(res[0].Data) != len(chunk)*n {
			return nil, fmt.Errorf("model %s: output has %d values for %d items of %d classes", c.cfg.ModelFile, len(res[0].Data), len(chunk), n)
		}
		for i := range chunk {
			scores := append([]float32(nil), res[0].Data[i*n:(i+1)*n]...)
			if c.cfg.Output == "logits" {
				softmax(scores)
			}
			best := 0
			for k, s := range scores {
				if s > scores[best] {
					best = k
				}
			}
			out = append(out, Class{ClassID: best, Category: c.labels[best], Scores: scores})
		}
	}
	return out, nil
}

func softmax(v []float32) {
	m := float32(math.Inf(-1))
	for _, x := range v {
		m = max(m, x)
	}
	var sum float64
	for i, x := range v {
		e := math.Exp(float64(x - m))
		v[i] = float32(e)
		sum += e
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / sum)
	}
}

// Classification serves a classifier as a model.Model.
type Classification struct {
	c      *classifier
	params []modelconf.Param
}

// classInput is a prepared image with its item's top list params.
type classInput struct {
	img    *imageio.RGB
	topK   int
	thresh float64
}

func newClassification(path string, opts model.Options) (model.Model, error) {
	if err := ort.Init(opts.ORTLib); err != nil {
		return nil, err
	}
	c, err := newClassifier(path, ortOptions{threads: opts.IntraOpThreads})
	if err != nil {
		return nil, err
	}
	// top_k's range is this model's class count.
	params := []modelconf.Param{
		{Key: "top_k", Kind: modelconf.Count, Min: 1, Max: float64(len(c.labels)), Doc: fmt.Sprintf("most classes in top, 1..%d", len(c.labels))},
		{Key: "score_threshold", Kind: modelconf.Prob, Doc: "minimum score of a class in top, 0..1"},
	}
	return &Classification{c: c, params: params}, nil
}

// Info implements model.Model.
func (m *Classification) Info() model.Info { return info(&m.c.cfg.base, "classification") }

// ValidateParams implements model.Model.
func (m *Classification) ValidateParams(p map[string]json.RawMessage) []model.FieldError {
	_, errs := modelconf.Parse("classification", m.params, p)
	return errs
}

// Prepare implements model.Model.
func (m *Classification) Prepare(image []byte, p map[string]json.RawMessage) (model.Input, error) {
	vals, img, err := m.c.cfg.Decode("classification", m.params, p, image)
	if err != nil {
		return nil, err
	}
	return &classInput{img: m.c.prepare(img), topK: vals.Int("top_k", m.c.cfg.TopK),
		thresh: vals.Float("score_threshold", m.c.cfg.ScoreThreshold)}, nil
}

// Run implements model.Model.
func (m *Classification) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	ins := make([]*classInput, len(batch))
	imgs := make([]*imageio.RGB, len(batch))
	for i, in := range batch {
		ci, ok := in.(*classInput)
		if !ok {
			return nil, fmt.Errorf("classification: item %d was not prepared by this model (%T)", i, in)
		}
		ins[i], imgs[i] = ci, ci.img
	}
	classes, err := m.c.run(ctx, imgs)
	if err != nil {
		return nil, err
	}
	out := make([]model.Result, len(classes))
	for i, c := range classes {
		c.Top = top(c.Scores, m.c.labels, ins[i].topK, ins[i].thresh)
		out[i] = model.Result{Data: c}
	}
	return out, nil
}

// Close implements model.Model.
func (m *Classification) Close() error { return m.c.sess.Close() }

func info(b *base, task string) model.Info { return b.Info(task) }

var _ model.Model = (*Classification)(nil)
