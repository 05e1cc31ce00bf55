// Package detect serves "detection" models: NanoDet and CenterNet (80 COCO
// classes each) on ONNX Runtime, answering per image the objects found
// with class, score and box in input-image pixels.
//
// The model TOML's head key says how the graph's outputs are read:
//
//   - "gfl" (NanoDet): per feature level (strides 8, 16, 32 over the
//     square input), one sigmoid score per class and, per side of the box
//     (left, top, right, bottom), a distribution over reg_max+1 distance
//     bins: the distance is the distribution's mean (softmax over the
//     bins) times the stride, from the cell's centre (gfl.go).
//   - "centernet": one class heatmap over a grid of stride-pixel cells and
//     per cell the four distances to the box's sides; a cell is an object
//     of a class where its score is the largest of its 3×3 neighbourhood
//     (centernet.go).
//
// Either way candidates above the score threshold go through class-aware
// NMS. The image is stretched to the input; the graphs run one image at a
// time (their reshapes fix batch 1).
package detect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/boxes"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

const task = "detection"

var params = boxes.Params("minimum class score of a box", "overlap (IoU) above which the lower-scored box of a class is dropped")

func init() { model.Register(task, newModel) }

// config is a "detection" model TOML (conf/models/nanodet.toml,
// centernet.toml). The graph takes [1, 3, size, size]: channels in
// channel_order, each (v − mean)/std on 0..255 pixel values.
type config struct {
	modelconf.Head
	InputName    string    `toml:"input_name"`
	InputSize    int       `toml:"input_size"`
	ChannelOrder string    `toml:"channel_order"`
	Mean         []float64 `toml:"mean"`
	Std          []float64 `toml:"std"`
	Labels       []string  `toml:"labels"`
	// Head is "gfl" (default) or "centernet".
	DetHead string `toml:"head"`
	// The gfl head: its levels, and RegMax+1 distance bins per box side.
	Levels []level `toml:"levels"`
	RegMax int     `toml:"reg_max"`
	// The centernet head: the outputs' names and the grid's stride.
	CenterNet centerNet `toml:"centernet"`
	// Defaults of the request params.
	boxes.Defaults

	norm modelconf.Norm
}

// level is one feature level: its stride and the names of its score
// output [1, cells, classes] and box output [1, cells, 4·(reg_max+1)].
type level struct {
	Stride int    `toml:"stride"`
	Scores string `toml:"scores"`
	Boxes  string `toml:"boxes"`
}

func loadConfig(path string) (*config, error) {
	c := &config{}
	if err := modelconf.Load(path, c); err != nil {
		return nil, err
	}
	var errs []error
	if c.ModelFile == "" || c.InputName == "" || c.InputSize <= 0 || len(c.Labels) == 0 {
		errs = append(errs, errors.New("model_file, input_name, input_size and labels are required"))
	}
	switch c.DetHead {
	case "", "gfl":
		c.DetHead = "gfl"
		if c.RegMax <= 0 || len(c.Levels) == 0 || c.CenterNet != (centerNet{}) {
			errs = append(errs, errors.New("the gfl head needs reg_max and at least one of levels, and no [centernet]"))
		}
	case "centernet":
		cn := c.CenterNet
		if cn.Stride <= 0 || c.InputSize%cn.Stride != 0 || cn.Heatmap == "" || cn.Sizes == "" || c.RegMax != 0 || len(c.Levels) != 0 {
			errs = append(errs, fmt.Errorf("the centernet head needs [centernet] with a stride dividing input_size, heatmap and sizes, and no reg_max or levels (got %+v)", cn))
		}
	default:
		errs = append(errs, fmt.Errorf("head %q: want gfl or centernet", c.DetHead))
	}
	// Mean and std are on 0..255.
	norm, err := modelconf.ParseNorm(c.ChannelOrder, c.Mean, c.Std, 1)
	errs = append(errs, err)
	c.norm = norm
	for i, l := range c.Levels {
		if l.Stride <= 0 || c.InputSize%l.Stride != 0 || l.Scores == "" || l.Boxes == "" {
			errs = append(errs, fmt.Errorf("levels[%d] %+v: want a stride dividing input_size and both output names", i, l))
		}
	}
	errs = append(errs, c.Defaults.Check())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	return c, nil
}

// Model is one NanoDet instance.
type Model struct {
	modelconf.Common
	cfg   *config
	sess  *ort.Session
	batch ort.Batch
}

type input struct {
	img  *imageio.RGB
	w, h int
	boxes.Request
}

func newModel(path string, opts model.Options) (model.Model, error) {
	cfg, sess, err := modelconf.Open(path, opts, loadConfig, func(cfg *config) []string {
		if cfg.DetHead == "centernet" {
			return []string{cfg.InputName, cfg.CenterNet.Heatmap, cfg.CenterNet.Sizes}
		}
		names := []string{cfg.InputName}
		for _, l := range cfg.Levels {
			names = append(names, l.Scores, l.Boxes)
		}
		return names
	})
	if err != nil {
		return nil, err
	}
	m := &Model{Common: modelconf.NewCommon(task, params, &cfg.Head), cfg: cfg, sess: sess}
	// The warm-up run loads the kernels and checks the outputs against the
	// configured head and labels.
	_, err = m.detect(context.Background(), &input{img: imageio.NewRGB(cfg.InputSize, cfg.InputSize), w: 1, h: 1, Request: boxes.Request{Score: 1}})
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
	return &input{img: img.Resize(m.cfg.InputSize, m.cfg.InputSize), w: img.W, h: img.H,
		Request: m.cfg.Request(vals)}, nil
}

// Run implements model.Model.
func (m *Model) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	return modelconf.Each(task, batch, func(in *input) (any, error) { return m.detect(ctx, in) })
}

// box is a candidate in input-square pixels.
type box struct {
	class int
	score float64
	b     [4]float64
}

func (m *Model) detect(ctx context.Context, in *input) ([]envelope.Detection, error) {
	size := m.cfg.InputSize
	t := m.batch.Reset(1, 3, size, size)
	m.cfg.norm.Planes(in.img, t.Data, size, size)
	res, err := m.sess.Run(ctx, []ort.Tensor{t})
	if err != nil {
		return nil, err
	}
	var cands []box
	if m.cfg.DetHead == "centernet" {
		cands, err = m.cfg.CenterNet.decode(res[0].Data, res[1].Data, size, len(m.cfg.Labels), in.Score)
	} else {
		cands, err = m.decodeGFL(res, in.Score)
	}
	if err != nil {
		return nil, err
	}
	kept := nms(cands, in.IoU)
	sx, sy := float64(in.w)/float64(size), float64(in.h)/float64(size)
	out := make([]envelope.Detection, 0, len(kept))
	for _, k := range kept {
		if in.Limit > 0 && len(out) == in.Limit {
			break
		}
		x1 := math.Max(0, math.Min(float64(in.w), k.b[0]*sx))
		y1 := math.Max(0, math.Min(float64(in.h), k.b[1]*sy))
		x2 := math.Max(0, math.Min(float64(in.w), k.b[2]*sx))
		y2 := math.Max(0, math.Min(float64(in.h), k.b[3]*sy))
		out = append(out, envelope.Detection{ClassID: k.class, Score: math.Round(k.score*1e4) / 1e4, Category: m.cfg.Labels[k.class],
			BBox: [4]float64{math.Round(x1*10) / 10, math.Round(y1*10) / 10, math.Round(x2*10) / 10, math.Round(y2*10) / 10}})
	}
	return out, nil
}

// maxCandidates bounds the candidates that enter NMS, best first (as
// NanoDet's nms_pre and CenterNet's own top-100 do): at a score threshold
// of 0 every cell of every class is one, and NMS is quadratic.
const maxCandidates = boxes.MaxResults

// nms keeps, best first, each of the best maxCandidates candidates that
// overlaps no kept box of its own class by more than iouThresh.
func nms(cands []box, iouThresh float64) []box {
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].score > cands[j].score })
	cands = cands[:min(len(cands), maxCandidates)]
	var kept []box
	for _, c := range cands {
		ok := true
		for _, k := range kept {
			if k.class == c.class && boxes.IoU(k.b, c.b) > iouThresh {
				ok = false
				break
			}
		}
		if ok {
			kept = append(kept, c)
		}
	}
	return kept
}

// Close implements model.Model.
func (m *Model) Close() error { return m.sess.Close() }

var _ model.Model = (*Model)(nil)
