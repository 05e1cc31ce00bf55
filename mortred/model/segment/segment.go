// Package segment serves "segmentation" models: one-class masks such as
// MediaPipe's selfie segmenter (a person), on ONNX Runtime. Each image is
// stretched to the model's input; the probability map that comes out is
// scaled back to the image's size (bilinear), thresholded, and answered as
// a grey PNG with its bounding box and coverage.
package segment

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

const task = "segmentation"

var params = []modelconf.Param{
	{Key: "threshold", Kind: modelconf.Prob, Doc: "mask probability at or above which a pixel is in the mask, 0..1"},
}

func init() { model.Register(task, newModel) }

// config is a "segmentation" model TOML (conf/models/selfie.toml).
//
// Its model_file takes [N, 3, H, W] RGB scaled to 0..1 and answers one
// probability per pixel, [N, H, W, 1] (or [N, 1, H, W]: the same values).
type config struct {
	modelconf.Head
	InputName  string `toml:"input_name"`
	OutputName string `toml:"output_name"`
	// InputSize is [height, width].
	InputSize []int   `toml:"input_size"`
	Threshold float64 `toml:"threshold"`
	// MaxBatch bounds the images of one session run.
	MaxBatch int `toml:"max_batch"`
}

func loadConfig(path string) (*config, error) {
	c := &config{}
	if err := modelconf.Load(path, c); err != nil {
		return nil, err
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 4
	}
	var errs []error
	if c.ModelFile == "" || c.InputName == "" || c.OutputName == "" {
		errs = append(errs, errors.New("model_file, input_name and output_name are required"))
	}
	if len(c.InputSize) != 2 || c.InputSize[0] <= 0 || c.InputSize[1] <= 0 {
		errs = append(errs, fmt.Errorf("input_size %v: want [height, width]", c.InputSize))
	}
	if c.Threshold < 0 || c.Threshold > 1 {
		errs = append(errs, fmt.Errorf("threshold %v: want 0..1", c.Threshold))
	}
	if c.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("max_batch %d: must be ≥ 0", c.MaxBatch))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	return c, nil
}

// Model is one segmentation instance.
type Model struct {
	modelconf.Common
	cfg   *config
	sess  *ort.Session
	batch ort.Batch
	h, w  int
}

// input is one prepared image: resized to the model's input, with the
// original size and the threshold to apply.
type input struct {
	img       *imageio.RGB
	w, h      int
	threshold float64
}

func newModel(path string, opts model.Options) (model.Model, error) {
	cfg, sess, err := modelconf.Open(path, opts, loadConfig, func(cfg *config) []string { return []string{cfg.InputName, cfg.OutputName} })
	if err != nil {
		return nil, err
	}
	m := &Model{Common: modelconf.NewCommon(task, params, &cfg.Head), cfg: cfg, sess: sess, h: cfg.InputSize[0], w: cfg.InputSize[1]}
	// The warm-up run loads the kernels and checks the output size.
	_, err = m.run(context.Background(), []*input{{img: imageio.NewRGB(m.w, m.h), w: 1, h: 1, threshold: 1}})
	if err := cfg.WarmUp(sess, err); err != nil {
		return nil, err
	}
	return m, nil
}

// Prepare implements model.Model.
func (m *Model) Prepare(image []byte, p map[string]json.RawMessage) (model.Input, error) {
	vals, img, err := m.Decode(p, image)
	if err != nil {
		return nil, err
	}
	return &input{img: img.Resize(m.w, m.h), w: img.W, h: img.H, threshold: vals.Float("threshold", m.cfg.Threshold)}, nil
}

// Run implements model.Model.
func (m *Model) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	items := make([]*input, len(batch))
	for i, in := range batch {
		it, ok := in.(*input)
		if !ok {
			return nil, fmt.Errorf("%s: item %d was not prepared by this model (%T)", task, i, in)
		}
		items[i] = it
	}
	segs, err := m.run(ctx, items)
	if err != nil {
		return nil, err
	}
	out := make([]model.Result, len(segs))
	for i, s := range segs {
		out[i] = model.Result{Data: s}
	}
	return out, nil
}

// run segments items in runs of at most max_batch.
func (m *Model) run(ctx context.Context, items []*input) ([]envelope.Segmentation, error) {
	out := make([]envelope.Segmentation, 0, len(items))
	plane := m.h * m.w
	for start := 0; start < len(items); start += m.cfg.MaxBatch {
		chunk := items[start:min(start+m.cfg.MaxBatch, len(items))]
		t := m.batch.Reset(len(chunk), 3, m.h, m.w)
		for i, it := range chunk {
			modelconf.Unit.Planes(it.img, t.Item(i), m.h, m.w)
		}
		res, err := m.sess.Run(ctx, []ort.Tensor{t})
		if err != nil {
			return nil, err
		}
		if len(res[0].Data) != len(chunk)*plane {
			return nil, fmt.Errorf("model %s: output has %d values for %d images of %d×%d", m.cfg.ModelFile, len(res[0].Data), len(chunk), m.w, m.h)
		}
		for i, it := range chunk {
			s, err := mask(res[0].Data[i*plane:(i+1)*plane], m.w, m.h, it)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// mask scales one probability map (mw×mh) to the image's size with
// bilinear sampling on pixel centres, thresholds it and encodes the answer.
func mask(prob []float32, mw, mh int, it *input) (envelope.Segmentation, error) {
	g := image.NewGray(image.Rect(0, 0, it.w, it.h))
	thr := float32(it.threshold)
	x0s, x1s, fxs := axis(it.w, mw)
	y0s, y1s, fys := axis(it.h, mh)
	minX, minY, maxX, maxY, n := it.w, it.h, -1, -1, 0
	for y := range it.h {
		r0, r1, fy := prob[y0s[y]*mw:], prob[y1s[y]*mw:], fys[y]
		row := g.Pix[y*g.Stride:]
		for x := range it.w {
			a, b, fx := x0s[x], x1s[x], fxs[x]
			top := r0[a] + (r0[b]-r0[a])*fx
			bot := r1[a] + (r1[b]-r1[a])*fx
			if top+(bot-top)*fy >= thr {
				row[x] = 255
				n++
				minX, maxX = min(minX, x), max(maxX, x)
				minY, maxY = min(minY, y), max(maxY, y)
			}
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, g); err != nil {
		return envelope.Segmentation{}, err
	}
	s := envelope.Segmentation{Mask: base64.StdEncoding.EncodeToString(buf.Bytes()), Width: it.w, Height: it.h,
		Coverage: math.Round(float64(n)/float64(it.w*it.h)*1e4) / 1e4}
	if n > 0 {
		s.BBox = [4]float64{float64(minX), float64(minY), float64(maxX + 1), float64(maxY + 1)}
	}
	return s, nil
}

// axis is, per output coordinate, the two source indices and the weight of
// the second: half-pixel sampling of n source cells onto out cells.
func axis(out, n int) ([]int, []int, []float32) {
	i0s, i1s, fs := make([]int, out), make([]int, out), make([]float32, out)
	scale := float64(n) / float64(out)
	for d := range out {
		s := max(0, (float64(d)+0.5)*scale-0.5)
		i0 := min(int(s), n-1)
		i0s[d], i1s[d], fs[d] = i0, min(i0+1, n-1), float32(s-float64(i0))
	}
	return i0s, i1s, fs
}

// Close implements model.Model.
func (m *Model) Close() error { return m.sess.Close() }

var _ model.Model = (*Model)(nil)
