package face

import (
	"errors"
	"fmt"

	"github.com/fe64bb06/frontdoor/mortred/model/boxes"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
)

// config is a "face_detection" model TOML (conf/models/blazeface.toml).
//
// Its model_file is the ONNX graph: input [1, size, size, 3] NHWC, RGB
// scaled to -1..1; per anchor grid one score output [1, n, 1] (logits) and
// one box output [1, n, 16] (centre, size, 6 keypoints).
type config struct {
	modelconf.Head
	InputName string `toml:"input_name"`
	InputSize int    `toml:"input_size"`
	// Grids are the anchor grids in output order; ScoreOutputs and
	// BoxOutputs name each grid's tensors.
	Grids        []grid   `toml:"grids"`
	ScoreOutputs []string `toml:"score_outputs"`
	BoxOutputs   []string `toml:"box_outputs"`
	// Defaults of the request params.
	boxes.Defaults
}

// grid is one anchor layer: Cells×Cells cells, Anchors per cell, all
// anchors of a cell at its centre with unit size (MediaPipe's SSD anchors
// with fixed_anchor_size).
type grid struct {
	Cells   int `toml:"cells"`
	Anchors int `toml:"anchors"`
}

func loadConfig(path string) (*config, error) {
	c := &config{}
	if err := modelconf.Load(path, c); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	return c, nil
}

func (c *config) validate() error {
	var errs []error
	if c.ModelFile == "" || c.InputName == "" {
		errs = append(errs, errors.New("model_file and input_name are required"))
	}
	if c.InputSize <= 0 {
		errs = append(errs, fmt.Errorf("input_size %d: must be positive", c.InputSize))
	}
	if len(c.Grids) == 0 || len(c.ScoreOutputs) != len(c.Grids) || len(c.BoxOutputs) != len(c.Grids) {
		errs = append(errs, fmt.Errorf("want one score and one box output per grid (grids %d, score_outputs %d, box_outputs %d)",
			len(c.Grids), len(c.ScoreOutputs), len(c.BoxOutputs)))
	}
	for i, g := range c.Grids {
		if g.Cells <= 0 || g.Anchors <= 0 {
			errs = append(errs, fmt.Errorf("grids[%d] %+v: cells and anchors must be positive", i, g))
		}
	}
	errs = append(errs, c.Defaults.Check())
	return errors.Join(errs...)
}
