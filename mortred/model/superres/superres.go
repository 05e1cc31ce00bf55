// Package superres serves "super_resolution" models: Real-ESRGAN's ×4
// networks (the compact realesr-animevideov3 and the RRDB
// realesrgan-x4plus-anime, one TOML each) on ONNX Runtime. Any image size
// goes in (up to max_input_pixels: the work grows with the pixels, and a
// larger image answers 422); the answer is the upscaled image as PNG with
// its size.
//
// Both networks were trained on illustrations: on photographs they still
// upscale, with a painted look. Each image runs alone (the sizes differ).
package superres

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

const task = "super_resolution"

func init() { model.Register(task, newModel) }

// config is a "super_resolution" model TOML (conf/models/realesrgan.toml,
// realesrgan_x4plus_anime.toml).
// The graph takes [1, 3, H, W] RGB in 0..1 and answers [1, 3, scale·H,
// scale·W] in 0..1 (clamped here).
type config struct {
	modelconf.Head
	InputName  string `toml:"input_name"`
	OutputName string `toml:"output_name"`
	Scale      int    `toml:"scale"`
	// MaxInputPixels bounds width × height of an image this model takes.
	MaxInputPixels int `toml:"max_input_pixels"`
}

func loadConfig(path string) (*config, error) {
	c := &config{}
	if err := modelconf.Load(path, c); err != nil {
		return nil, err
	}
	if c.ModelFile == "" || c.InputName == "" || c.OutputName == "" || c.Scale < 1 || c.MaxInputPixels < 1 {
		return nil, fmt.Errorf("model config %s: %w", path,
			errors.New("model_file, input_name, output_name, scale (≥ 1) and max_input_pixels (≥ 1) are required"))
	}
	return c, nil
}

// Model is one super-resolution instance.
type Model struct {
	modelconf.Common
	cfg   *config
	sess  *ort.Session
	batch ort.Batch
}

func newModel(path string, opts model.Options) (model.Model, error) {
	cfg, sess, err := modelconf.Open(path, opts, loadConfig, func(cfg *config) []string { return []string{cfg.InputName, cfg.OutputName} })
	if err != nil {
		return nil, err
	}
	m := &Model{Common: modelconf.NewCommon(task, nil, &cfg.Head), cfg: cfg, sess: sess}
	// The warm-up run loads the kernels and checks the scale.
	_, err = m.upscale(context.Background(), imageio.NewRGB(8, 8))
	if err := cfg.WarmUp(sess, err); err != nil {
		return nil, err
	}
	return m, nil
}

// Prepare implements model.Model.
func (m *Model) Prepare(image []byte, p map[string]json.RawMessage) (model.Input, error) {
	_, img, err := m.Decode(p, image)
	if err != nil {
		return nil, err
	}
	if n := img.W * img.H; n > m.cfg.MaxInputPixels {
		return nil, &model.ItemError{Status: envelope.StatusInvalidRequest,
			Msg: fmt.Sprintf("image is %d×%d = %d pixels; this model takes at most %d (max_input_pixels)", img.W, img.H, n, m.cfg.MaxInputPixels)}
	}
	return img, nil
}

// Run implements model.Model.
func (m *Model) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	return modelconf.Each(task, batch, func(img *imageio.RGB) (any, error) { return m.upscale(ctx, img) })
}

func (m *Model) upscale(ctx context.Context, img *imageio.RGB) (envelope.SuperResolution, error) {
	t := m.batch.Reset(1, 3, img.H, img.W)
	modelconf.Unit.Planes(img, t.Data, img.H, img.W)
	res, err := m.sess.Run(ctx, []ort.Tensor{t})
	if err != nil {
		return envelope.SuperResolution{}, err
	}
	s := m.cfg.Scale
	w, h := s*img.W, s*img.H
	if len(res[0].Data) != 3*w*h {
		return envelope.SuperResolution{}, fmt.Errorf("model %s: output has %d values for a %d×%d image, want ×%d", m.cfg.ModelFile, len(res[0].Data), img.W, img.H, s)
	}
	out := image.NewNRGBA(image.Rect(0, 0, w, h))
	big := w * h
	for p := range big {
		for c := range 3 {
			v := res[0].Data[c*big+p]
			out.Pix[4*p+c] = uint8(min(1, max(0, v))*255 + 0.5)
		}
		out.Pix[4*p+3] = 255
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, out); err != nil {
		return envelope.SuperResolution{}, err
	}
	return envelope.SuperResolution{Image: base64.StdEncoding.EncodeToString(buf.Bytes()), Width: w, Height: h, Scale: s}, nil
}

// Close implements model.Model.
func (m *Model) Close() error { return m.sess.Close() }

var _ model.Model = (*Model)(nil)
