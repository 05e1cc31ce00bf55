package ppocr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

// detConfig is a "text_detection" model TOML (DBNet). Zero values take the
// defaults in parentheses.
type detConfig struct {
	base
	// LimitSideLen: images are scaled so the longer side is at most this
	// (960).
	LimitSideLen int `toml:"limit_side_len"`
	// SizeMultiple: each side is rounded to the nearest multiple (32; the
	// model needs it).
	SizeMultiple int `toml:"size_multiple"`
	// PadMultiple: the tensor is padded up to a multiple of this (equal to
	// size_multiple), so fewer shapes reach ONNX Runtime and more images
	// share a batch.
	PadMultiple int `toml:"pad_multiple"`
	// Thresh binarises the probability map (0.3); BoxThresh is the least
	// box score kept (0.6); UnclipRatio grows boxes (1.5); MinSize drops
	// boxes with a shorter side in map pixels (3); MaxCandidates bounds the
	// regions looked at (1000); MaxResults bounds the boxes returned, the
	// best scores kept (0 = all).
	Thresh        float64 `toml:"thresh"`
	BoxThresh     float64 `toml:"box_thresh"`
	UnclipRatio   float64 `toml:"unclip_ratio"`
	MinSize       int     `toml:"min_size"`
	MaxCandidates int     `toml:"max_candidates"`
	MaxResults    int     `toml:"max_results"`
}

func (c *detConfig) validate() error {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	deff := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.LimitSideLen, 960)
	def(&c.SizeMultiple, 32)
	def(&c.PadMultiple, c.SizeMultiple)
	def(&c.MinSize, 3)
	def(&c.MaxCandidates, 1000)
	deff(&c.Thresh, 0.3)
	deff(&c.BoxThresh, 0.6)
	deff(&c.UnclipRatio, 1.5)
	errs := []error{c.base.validate()}
	if c.SizeMultiple < 1 || c.PadMultiple%c.SizeMultiple != 0 || c.LimitSideLen < c.SizeMultiple {
		errs = append(errs, fmt.Errorf("size_multiple %d, pad_multiple %d, limit_side_len %d: want pad_multiple a multiple of size_multiple and limit_side_len ≥ size_multiple",
			c.SizeMultiple, c.PadMultiple, c.LimitSideLen))
	}
	if c.Thresh < 0 || c.Thresh > 1 || c.BoxThresh < 0 || c.BoxThresh > 1 || c.UnclipRatio < 0 {
		errs = append(errs, fmt.Errorf("thresh %v, box_thresh %v, unclip_ratio %v: thresholds are 0..1, the ratio positive", c.Thresh, c.BoxThresh, c.UnclipRatio))
	}
	if c.MinSize < 0 || c.MaxCandidates < 0 || c.MaxResults < 0 {
		errs = append(errs, errors.New("min_size, max_candidates and max_results must be ≥ 0"))
	}
	return errors.Join(errs...)
}

func (c *detConfig) settings(p params) detSettings {
	s := detSettings{thresh: c.Thresh, boxThresh: c.BoxThresh, unclipRatio: c.UnclipRatio,
		minSize: c.MinSize, maxCandidates: c.MaxCandidates, maxResults: c.MaxResults}
	if p.Thresh != nil {
		s.thresh = *p.Thresh
	}
	if p.BoxThresh != nil {
		s.boxThresh = *p.BoxThresh
	}
	if p.UnclipRatio != nil {
		s.unclipRatio = *p.UnclipRatio
	}
	if p.MaxResults != nil {
		s.maxResults = *p.MaxResults
	}
	return s
}

// Box is one text_detection result, in source pixels.
type Box struct {
	Score   float32  `json:"score"`
	BBox    [4]int   `json:"bbox"`
	Polygon [][2]int `json:"polygon"`
}

func (b textBox) public() Box {
	out := Box{Score: float32(b.score), Polygon: make([][2]int, 4)}
	minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for i, p := range b.poly {
		out.Polygon[i] = [2]int{int(math.Round(p[0])), int(math.Round(p[1]))}
		minX, minY = math.Min(minX, p[0]), math.Min(minY, p[1])
		maxX, maxY = math.Max(maxX, p[0]), math.Max(maxY, p[1])
	}
	out.BBox = [4]int{int(math.Floor(minX)), int(math.Floor(minY)), int(math.Ceil(maxX)), int(math.Ceil(maxY))}
	return out
}

// page is one prepared detection input.
type page struct {
	src      *imageio.RGB // the decoded image (the ocr pipeline crops it)
	resized  *imageio.RGB
	padH     int
	padW     int
	settings detSettings
	ocr      params // the request's params, for the ocr pipeline
}

type detector struct {
	cfg   *detConfig
	sess  *ort.Session
	batch ort.Batch
	post  dbPost
}

func newDetector(path string, opts ortOptions) (*detector, error) {
	cfg := &detConfig{}
	if err := load(path, cfg); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	sess, err := cfg.session(opts)
	if err != nil {
		return nil, err
	}
	d := &detector{cfg: cfg, sess: sess}
	n := cfg.PadMultiple
	out, err := sess.Run(context.Background(), []ort.Tensor{d.batch.Reset(1, 3, n, n)})
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("model %s: warm-up run: %v", cfg.ModelFile, err)
	}
	if sh := out[0].Shape; len(sh) != 4 || sh[1] != 1 || int(sh[2]) != n || int(sh[3]) != n {
		sess.Close()
		return nil, fmt.Errorf("model %s: output shape %v for a %dx%d input; a DBNet map of [N,1,H,W] is needed", cfg.ModelFile, sh, n, n)
	}
	return d, nil
}

func (d *detector) prepare(img *imageio.RGB, p params) *page {
	ratio := 1.0
	if m := max(img.W, img.H); m > d.cfg.LimitSideLen {
		ratio = float64(d.cfg.LimitSideLen) / float64(m)
	}
	side := func(n int) int {
		k := d.cfg.SizeMultiple
		return max(k, int(math.Round(float64(n)*ratio/float64(k)))*k)
	}
	rw, rh := side(img.W), side(img.H)
	return &page{
		src:      img,
		resized:  img.Resize(rw, rh),
		padW:     roundUp(rw, d.cfg.PadMultiple),
		padH:     roundUp(rh, d.cfg.PadMultiple),
		settings: d.cfg.settings(p),
		ocr:      p,
	}
}

// run finds each page's boxes, in reading order. Pages are fed together only
// when their padded shapes are equal, so a page's boxes do not depend on its
// batch mates.
func (d *detector) run(ctx context.Context, pages []*page) ([][]textBox, error) {
	out := make([][]textBox, len(pages))
	type shape struct{ h, w int }
	groups := map[shape][]int{}
	var order []shape
	for i, p := range pages {
		k := shape{p.padH, p.padW}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, sh := range order {
		idx := groups[sh]
		for start := 0; start < len(idx); start += d.cfg.MaxBatch {
			chunk := idx[start:min(start+d.cfg.MaxBatch, len(idx))]
			in := d.batch.Reset(len(chunk), 3, sh.h, sh.w)
			for k, i := range chunk {
				d.cfg.norm.Planes(pages[i].resized, in.Item(k), sh.h, sh.w)
			}
			res, err := d.sess.Run(ctx, []ort.Tensor{in})
			if err != nil {
				return nil, err
			}
			if got := res[0].Shape; len(got) != 4 || int(got[0]) != len(chunk) || int(got[2]) != sh.h || int(got[3]) != sh.w {
				return nil, fmt.Errorf("model %s: output shape %v for input %v", d.cfg.ModelFile, got, in.Shape)
			}
			for k, i := range chunk {
				p := pages[i]
				m := res[0].Data[k*sh.h*sh.w : (k+1)*sh.h*sh.w]
				sx := float64(p.src.W) / float64(p.resized.W)
				sy := float64(p.src.H) / float64(p.resized.H)
				boxes := d.post.boxes(m, sh.w, p.resized.H, p.resized.W, p.settings, sx, sy, p.src.W, p.src.H)
				boxes = keepBest(boxes, p.settings.maxResults)
				readingOrder(boxes)
				out[i] = boxes
			}
		}
	}
	return out, nil
}

// Detection serves a DBNet text detector as a model.Model.
type Detection struct {
	d *detector
}

func newDetection(path string, opts model.Options) (model.Model, error) {
	if err := ort.Init(opts.ORTLib); err != nil {
		return nil, err
	}
	d, err := newDetector(path, ortOptions{threads: opts.IntraOpThreads})
	if err != nil {
		return nil, err
	}
	return &Detection{d: d}, nil
}

// Info implements model.Model.
func (m *Detection) Info() model.Info { return info(&m.d.cfg.base, "text_detection") }

// ValidateParams implements model.Model.
func (m *Detection) ValidateParams(p map[string]json.RawMessage) []model.FieldError {
	_, errs := parseParams("text_detection", detectionParams, p)
	return errs
}

// Prepare implements model.Model.
func (m *Detection) Prepare(image []byte, raw map[string]json.RawMessage) (model.Input, error) {
	p, errs := parseParams("text_detection", detectionParams, raw)
	if errs != nil {
		return nil, invalidParams(errs)
	}
	img, err := imageio.Decode(image, m.d.cfg.MaxPixels)
	if err != nil {
		return nil, err
	}
	return m.d.prepare(img, p), nil
}

// Run implements model.Model.
func (m *Detection) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	pages, err := pagesOf("text_detection", batch)
	if err != nil {
		return nil, err
	}
	found, err := m.d.run(ctx, pages)
	if err != nil {
		return nil, err
	}
	out := make([]model.Result, len(found))
	for i, boxes := range found {
		data := make([]Box, len(boxes))
		for k, b := range boxes {
			data[k] = b.public()
		}
		out[i] = model.Result{Data: data}
	}
	return out, nil
}

func pagesOf(task string, batch []model.Input) ([]*page, error) {
	pages := make([]*page, len(batch))
	for i, in := range batch {
		p, ok := in.(*page)
		if !ok {
			return nil, fmt.Errorf("%s: item %d was not prepared by this model (%T)", task, i, in)
		}
		pages[i] = p
	}
	return pages, nil
}

// Close implements model.Model.
func (m *Detection) Close() error { return m.d.sess.Close() }

var _ model.Model = (*Detection)(nil)
