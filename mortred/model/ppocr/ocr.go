package ppocr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

// ocrConfig is an "ocr" model TOML: it names the three model TOMLs it chains
// (paths relative to this file's directory) and the pipeline's own knobs.
// Zero values take the defaults in parentheses.
type ocrConfig struct {
	Type    string `toml:"type"`
	Name    string `toml:"name"`
	Version string `toml:"version"`
	// Category is read by the server's catalog (default: the type).
	Category string `toml:"category"`
	// Detection and Recognition are required; Classification (the 0°/180°
	// direction classifier, labels "0" and "180") is optional.
	Detection      string `toml:"detection"`
	Classification string `toml:"classification"`
	Recognition    string `toml:"recognition"`
	// ClsThresh: a line is turned when p(180) is above it (0.9).
	ClsThresh float64 `toml:"cls_thresh"`
	// UseAngleCls runs the classifier (true when one is configured).
	UseAngleCls *bool `toml:"use_angle_cls"`
	// MinScore drops lines recognised with a lower score (0.5).
	MinScore float64 `toml:"min_score"`
	// CropMargin grows each line's crop by this × its height (0.2).
	CropMargin float64 `toml:"crop_margin"`
}

// Line is one ocr result, in source pixels; angle is 0 or 180.
type Line struct {
	BBox    [4]int   `json:"bbox"`
	Polygon [][2]int `json:"polygon"`
	Text    string   `json:"text"`
	Score   float32  `json:"score"`
	Angle   int      `json:"angle"`
}

// OCR chains detection, direction classification and recognition in one
// request: the three sessions live in one instance and run back to back.
type OCR struct {
	cfg    ocrConfig
	det    *detector
	cls    *classifier // nil when not configured
	idx180 int
	rec    *recognizer
}

func newOCR(path string, opts model.Options) (model.Model, error) {
	if err := ort.Init(opts.ORTLib); err != nil {
		return nil, err
	}
	var cfg ocrConfig
	dir, err := decodeStrict(path, &cfg)
	if err != nil {
		return nil, err
	}
	if cfg.ClsThresh == 0 {
		cfg.ClsThresh = 0.9
	}
	if cfg.MinScore == 0 {
		cfg.MinScore = 0.5
	}
	if cfg.CropMargin == 0 {
		cfg.CropMargin = 0.2
	}
	if cfg.UseAngleCls == nil {
		on := cfg.Classification != ""
		cfg.UseAngleCls = &on
	}
	var errs []error
	if cfg.Detection == "" || cfg.Recognition == "" {
		errs = append(errs, errors.New("detection and recognition (paths of their model TOMLs) are required"))
	}
	if *cfg.UseAngleCls && cfg.Classification == "" {
		errs = append(errs, errors.New("use_angle_cls needs classification (the direction classifier's model TOML)"))
	}
	if cfg.ClsThresh < 0 || cfg.ClsThresh > 1 || cfg.MinScore < 0 || cfg.MinScore > 1 || cfg.CropMargin < 0 || cfg.CropMargin > 2 {
		errs = append(errs, fmt.Errorf("cls_thresh %v, min_score %v, crop_margin %v: want 0..1, 0..1, 0..2", cfg.ClsThresh, cfg.MinScore, cfg.CropMargin))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	rel := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	o := ortOptions{threads: opts.IntraOpThreads}
	m := &OCR{cfg: cfg}
	if m.det, err = newDetector(rel(cfg.Detection), o); err != nil {
		return nil, err
	}
	if cfg.Classification != "" {
		if m.cls, err = newClassifier(rel(cfg.Classification), o); err != nil {
			m.Close()
			return nil, err
		}
		m.idx180 = -1
		for i, l := range m.cls.labels {
			if l == "180" {
				m.idx180 = i
			}
		}
		if m.idx180 < 0 {
			m.Close()
			return nil, fmt.Errorf("model config %s: the direction classifier %s needs a label \"180\" (labels: %v)", path, cfg.Classification, m.cls.labels)
		}
	}
	if m.rec, err = newRecognizer(rel(cfg.Recognition), o); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Info implements model.Model.
func (m *OCR) Info() model.Info {
	name := m.cfg.Name
	if name == "" {
		name = "ocr"
	}
	return model.Info{Name: name, Version: m.cfg.Version, Task: "ocr"}
}

// ValidateParams implements model.Model.
func (m *OCR) ValidateParams(p map[string]json.RawMessage) []model.FieldError {
	pp, errs := parseParams("ocr", ocrParams, p)
	if errs == nil && m.cls == nil && pp.UseAngleCls != nil && *pp.UseAngleCls {
		errs = append(errs, model.FieldError{Pointer: "/params/use_angle_cls", Message: "this ocr model has no direction classifier configured; send false or leave it out"})
	}
	return errs
}

// Prepare implements model.Model.
func (m *OCR) Prepare(image []byte, raw map[string]json.RawMessage) (model.Input, error) {
	if errs := m.ValidateParams(raw); errs != nil {
		return nil, invalidParams(errs)
	}
	p, _ := parseParams("ocr", ocrParams, raw)
	img, err := imageio.Decode(image, m.det.cfg.MaxPixels)
	if err != nil {
		return nil, err
	}
	return m.det.prepare(img, p), nil
}

// Run implements model.Model.
func (m *OCR) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	pages, err := pagesOf("ocr", batch)
	if err != nil {
		return nil, err
	}
	found, err := m.det.run(ctx, pages)
	if err != nil {
		return nil, err
	}
	type ref struct {
		item  int
		box   textBox
		crop  *imageio.RGB
		angle int
	}
	var refs []ref
	for i, boxes := range found {
		for _, b := range boxes {
			refs = append(refs, ref{item: i, box: b, crop: cropLine(pages[i].src, b.poly, m.cfg.CropMargin)})
		}
	}

	if m.cls != nil {
		var idx []int
		var imgs []*imageio.RGB
		for k, r := range refs {
			p := pages[r.item].ocr
			on := *m.cfg.UseAngleCls
			if p.UseAngleCls != nil {
				on = *p.UseAngleCls
			}
			if on {
				idx = append(idx, k)
				imgs = append(imgs, m.cls.prepare(r.crop))
			}
		}
		classes, err := m.cls.run(ctx, imgs)
		if err != nil {
			return nil, err
		}
		for n, k := range idx {
			thr := m.cfg.ClsThresh
			if p := pages[refs[k].item].ocr; p.ClsThresh != nil {
				thr = *p.ClsThresh
			}
			if float64(classes[n].Scores[m.idx180]) > thr {
				refs[k].crop = refs[k].crop.Rotate180()
				refs[k].angle = 180
			}
		}
	}

	lines := make([]line, len(refs))
	for k, r := range refs {
		lines[k] = m.rec.prepare(r.crop)
	}
	texts, err := m.rec.run(ctx, lines)
	if err != nil {
		return nil, err
	}

	out := make([]model.Result, len(pages))
	data := make([][]Line, len(pages))
	for i := range data {
		data[i] = []Line{}
	}
	for k, r := range refs {
		minScore := m.cfg.MinScore
		if p := pages[r.item].ocr; p.MinScore != nil {
			minScore = *p.MinScore
		}
		if float64(texts[k].Score) < minScore || texts[k].Text == "" {
			continue
		}
		b := r.box.public()
		data[r.item] = append(data[r.item], Line{BBox: b.BBox, Polygon: b.Polygon, Text: texts[k].Text, Score: texts[k].Score, Angle: r.angle})
	}
	for i := range out {
		out[i] = model.Result{Data: data[i]}
	}
	return out, nil
}

// Close implements model.Model.
func (m *OCR) Close() error {
	var errs []error
	if m.det != nil {
		errs = append(errs, m.det.sess.Close())
	}
	if m.cls != nil {
		errs = append(errs, m.cls.sess.Close())
	}
	if m.rec != nil {
		errs = append(errs, m.rec.sess.Close())
	}
	return errors.Join(errs...)
}

var _ model.Model = (*OCR)(nil)
