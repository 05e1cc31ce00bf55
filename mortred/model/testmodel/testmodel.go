// Package testmodel is mortred's built-in deterministic model (type
// "testmodel"): it decodes each image (PNG, JPEG, WebP) and classifies it by
// mean brightness as "dark" (class 0) or "light" (class 1). It needs no
// model file, so tests, benchmarks and the demo can run a real server.
//
// Request params:
//
//	delay_ms       int   adds that much run time for this item (0..60000)
//	session_error  bool  the whole batch fails with an engine error (tests)
//	bad_output     bool  the run returns too few results (tests of status 6)
//
// Model TOML keys besides type/name/category: version, batch_overhead_ms
// (fixed cost of every run, to show what batching saves), load_delay_ms
// (factory time, to test /ready), max_pixels.
package testmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
)

// Type is the registered model type.
const Type = "testmodel"

func init() { model.Register(Type, New) }

// Config is the model's TOML file.
type Config struct {
	Type            string `toml:"type"`
	Name            string `toml:"name"`     // default TESTMODEL
	Category        string `toml:"category"` // catalog only
	Version         string `toml:"version"`  // default "1"
	BatchOverheadMS int    `toml:"batch_overhead_ms"`
	LoadDelayMS     int    `toml:"load_delay_ms"`
	MaxPixels       int    `toml:"max_pixels"` // default imageio.DefaultMaxPixels
}

// Categories are the class names by class id.
var Categories = []string{"dark", "light"}

// MaxDelayMS bounds params.delay_ms.
const MaxDelayMS = 60000

// Model is one instance; it keeps no state between runs.
type Model struct {
	cfg Config
}

// New is the factory; configPath may be empty for the defaults.
func New(configPath string, _ model.Options) (model.Model, error) {
	cfg := Config{Type: Type}
	if configPath != "" {
		md, err := toml.DecodeFile(configPath, &cfg)
		if err != nil {
			return nil, fmt.Errorf("testmodel: %w", err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, fmt.Errorf("testmodel: %s: unknown keys %v", configPath, und)
		}
	}
	if cfg.Type != Type {
		return nil, fmt.Errorf("testmodel: %s has type %q, want %q", configPath, cfg.Type, Type)
	}
	if cfg.Name == "" {
		cfg.Name = "TESTMODEL"
	}
	if cfg.Version == "" {
		cfg.Version = "1"
	}
	if cfg.BatchOverheadMS < 0 || cfg.LoadDelayMS < 0 || cfg.MaxPixels < 0 {
		return nil, fmt.Errorf("testmodel: %s: batch_overhead_ms, load_delay_ms and max_pixels must not be negative", configPath)
	}
	if cfg.LoadDelayMS > 0 {
		time.Sleep(time.Duration(cfg.LoadDelayMS) * time.Millisecond)
	}
	return &Model{cfg: cfg}, nil
}

// Info implements model.Model.
func (m *Model) Info() model.Info {
	return model.Info{Name: m.cfg.Name, Version: m.cfg.Version, Task: "classification"}
}

type params struct {
	delay      time.Duration
	sessionErr bool
	badOutput  bool
}

func parseParams(p map[string]json.RawMessage) (params, []model.FieldError) {
	var out params
	var errs []model.FieldError
	for k, raw := range p {
		ptr := "/params" + envelope.Pointer(k)
		switch k {
		case "delay_ms":
			var ms int
			if err := json.Unmarshal(raw, &ms); err != nil || ms < 0 || ms > MaxDelayMS {
				errs = append(errs, model.FieldError{Pointer: ptr, Message: fmt.Sprintf("delay_ms must be an integer 0..%d", MaxDelayMS)})
			}
			out.delay = time.Duration(ms) * time.Millisecond
		case "session_error":
			if err := json.Unmarshal(raw, &out.sessionErr); err != nil {
				errs = append(errs, model.FieldError{Pointer: ptr, Message: "session_error must be a boolean"})
			}
		case "bad_output":
			if err := json.Unmarshal(raw, &out.badOutput); err != nil {
				errs = append(errs, model.FieldError{Pointer: ptr, Message: "bad_output must be a boolean"})
			}
		default:
			errs = append(errs, model.FieldError{Pointer: ptr, Message: fmt.Sprintf("unknown param %q; testmodel accepts delay_ms, session_error, bad_output", k)})
		}
	}
	return out, errs
}

// ValidateParams implements model.Model.
func (m *Model) ValidateParams(p map[string]json.RawMessage) []model.FieldError {
	_, errs := parseParams(p)
	return errs
}

type input struct {
	mean float64 // 0..1
	params
}

// Prepare implements model.Model: decode and average the luma.
func (m *Model) Prepare(img []byte, p map[string]json.RawMessage) (model.Input, error) {
	pp, errs := parseParams(p)
	if len(errs) > 0 {
		return nil, &model.ItemError{Status: envelope.StatusInvalidRequest, Msg: errs[0].Message}
	}
	rgb, err := imageio.Decode(img, m.cfg.MaxPixels)
	if err != nil {
		return nil, err
	}
	var sum uint64
	for i := 0; i+2 < len(rgb.Pix); i += 3 {
		// ITU-R BT.601 luma, integer weights summing to 1000.
		sum += 299*uint64(rgb.Pix[i]) + 587*uint64(rgb.Pix[i+1]) + 114*uint64(rgb.Pix[i+2])
	}
	n := uint64(rgb.W * rgb.H)
	return input{mean: float64(sum) / float64(n) / 1000 / 255, params: pp}, nil
}

// ErrSession is the engine failure params.session_error provokes.
var ErrSession = errors.New("testmodel: engine failure requested by params.session_error")

// Run implements model.Model: it sleeps the batch's run time, then classifies.
func (m *Model) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	d := time.Duration(m.cfg.BatchOverheadMS) * time.Millisecond
	short := false
	for _, in := range batch {
		it := in.(input)
		d += it.delay
		if it.sessionErr {
			return nil, ErrSession
		}
		short = short || it.badOutput
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	out := make([]model.Result, len(batch))
	for i, in := range batch {
		out[i] = model.Result{Data: Classify(in.(input).mean)}
	}
	if short {
		return out[:len(out)-1], nil
	}
	return out, nil
}

// Classify is the payload for a mean brightness in 0..1.
func Classify(mean float64) envelope.Classification {
	id := 0
	if mean >= 0.5 {
		id = 1
	}
	return envelope.Classification{ClassID: id, Category: Categories[id], Scores: []float64{1 - mean, mean}}
}

// Warm implements model.Warmer: one run on a generated image.
func (m *Model) Warm(ctx context.Context) error {
	in, err := m.Prepare(GrayPNG(8, 8, 128), nil)
	if err != nil {
		return err
	}
	_, err = m.Run(ctx, []model.Input{in})
	return err
}

// Close implements model.Model.
func (m *Model) Close() error { return nil }

// GrayPNG encodes a w×h PNG of one gray level (tests and warm-up).
func GrayPNG(w, h int, level uint8) []byte {
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = level
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, img)
	return buf.Bytes()
}

var (
	_ model.Model  = (*Model)(nil)
	_ model.Warmer = (*Model)(nil)
)
