// Package face serves "face_detection" models: MediaPipe BlazeFace (front
// camera, 128×128) on ONNX Runtime, answering per image the faces found
// with their box, score and six keypoints in input-image pixels.
//
// The image is letterboxed into the square input (aspect ratio kept,
// centred, black padding), as MediaPipe's own pipeline does; anchors are
// decoded per grid and overlapping detections blended by weighted NMS.
// The graph takes one image per run (its batch dimension is fixed at 1), so
// a batch is run item by item on the instance's one session.
package face

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/boxes"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

const task = "face_detection"

var params = boxes.Params("minimum face score", "overlap (IoU) at which detections blend into one face")

func init() { model.Register(task, newModel) }

// Model is one BlazeFace instance.
type Model struct {
	modelconf.Common
	cfg   *config
	sess  *ort.Session
	batch ort.Batch
}

// input is one prepared image: the letterboxed square and how it maps back.
type input struct {
	img *imageio.RGB
	lb  letterbox
	boxes.Request
}

func newModel(path string, opts model.Options) (model.Model, error) {
	cfg, sess, err := modelconf.Open(path, opts, loadConfig, func(cfg *config) []string {
		names := []string{cfg.InputName}
		for i := range cfg.Grids {
			names = append(names, cfg.ScoreOutputs[i], cfg.BoxOutputs[i])
		}
		return names
	})
	if err != nil {
		return nil, err
	}
	m := &Model{Common: modelconf.NewCommon(task, params, &cfg.Head), cfg: cfg, sess: sess}
	// The warm-up run loads the kernels and checks the outputs against the
	// configured grids, so a wrong TOML fails at startup, not per request.
	_, err = m.detect(context.Background(), &input{img: imageio.NewRGB(cfg.InputSize, cfg.InputSize), lb: letterbox{s: 1, w: cfg.InputSize, h: cfg.InputSize}, Request: boxes.Request{Score: 1}})
	if err := cfg.WarmUp(sess, err); err != nil {
		return nil, err
	}
	return m, nil
}

// Prepare implements model.Model: decode, letterbox, and fix the params.
func (m *Model) Prepare(image []byte, p map[string]json.RawMessage) (model.Input, error) {
	vals, img, err := m.Decode(p, image)
	if err != nil {
		return nil, err
	}
	size := m.cfg.InputSize
	s := float64(size) / float64(max(img.W, img.H))
	w := max(1, min(size, int(math.Round(float64(img.W)*s))))
	h := max(1, min(size, int(math.Round(float64(img.H)*s))))
	lb := letterbox{s: s, ox: float64(size-w) / 2, oy: float64(size-h) / 2, w: img.W, h: img.H}
	// The offsets are whole pixels when placed; keep the mapping exact.
	lb.ox, lb.oy = math.Floor(lb.ox), math.Floor(lb.oy)
	sq := imageio.NewRGB(size, size)
	small := img.Resize(w, h)
	for y := range h {
		copy(sq.Pix[3*((y+int(lb.oy))*size+int(lb.ox)):], small.Pix[3*y*w:3*(y+1)*w])
	}
	return &input{img: sq, lb: lb,
		Request: m.cfg.Request(vals)}, nil
}

// Run implements model.Model.
func (m *Model) Run(ctx context.Context, batch []model.Input) ([]model.Result, error) {
	return modelconf.Each(task, batch, func(in *input) (any, error) { return m.detect(ctx, in) })
}

func (m *Model) detect(ctx context.Context, in *input) ([]envelope.FaceDetection, error) {
	size := m.cfg.InputSize
	t := m.batch.Reset(1, size, size, 3) // NHWC
	for i, v := range in.img.Pix {
		t.Data[i] = float32(v)/127.5 - 1
	}
	res, err := m.sess.Run(ctx, []ort.Tensor{t})
	if err != nil {
		return nil, err
	}
	var cands []candidate
	for gi, g := range m.cfg.Grids {
		n := g.Cells * g.Cells * g.Anchors
		scores, boxes := res[2*gi].Data, res[2*gi+1].Data
		if len(scores) != n || len(boxes) != n*(4+2*keypoints) {
			return nil, fmt.Errorf("grid %d (%d×%d×%d anchors): outputs have %d scores and %d box values, want %d and %d",
				gi, g.Cells, g.Cells, g.Anchors, len(scores), len(boxes), n, n*(4+2*keypoints))
		}
		cands = decodeGrid(cands, g, scores, boxes, size, in.Score)
	}
	faces := weightedNMS(cands, in.IoU)
	out := make([]envelope.FaceDetection, 0, len(faces))
	for _, f := range faces {
		if in.Limit > 0 && len(out) == in.Limit {
			break
		}
		b := f.box()
		x1, y1 := in.lb.toImage(b[0], b[1], size)
		x2, y2 := in.lb.toImage(b[2], b[3], size)
		if x2 <= x1 || y2 <= y1 {
			continue // wholly in the padding
		}
		d := envelope.FaceDetection{Score: round(f.score, 4), BBox: [4]float64{round(x1, 1), round(y1, 1), round(x2, 1), round(y2, 1)},
			Keypoints: make([][2]float64, keypoints)}
		for k, p := range f.kp {
			x, y := in.lb.toImage(p[0], p[1], size)
			d.Keypoints[k] = [2]float64{round(x, 1), round(y, 1)}
		}
		out = append(out, d)
	}
	return out, nil
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// Close implements model.Model.
func (m *Model) Close() error { return m.sess.Close() }

var _ model.Model = (*Model)(nil)
