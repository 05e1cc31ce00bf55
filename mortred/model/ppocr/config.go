package ppocr

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

// base holds the keys every model TOML of this package has: the common head
// (type, name, model_dir, model_file, …; its path rule applies to the
// label and dictionary files too) and the tensor and normalisation keys.
type base struct {
	modelconf.Head
	// InputName and OutputName are the graph's tensor names; default "x"
	// for the input, the output is required.
	InputName  string `toml:"input_name"`
	OutputName string `toml:"output_name"`
	// ChannelOrder is the order of colour channels fed to the model: "RGB"
	// (default) or "BGR" (PaddleOCR's models).
	ChannelOrder string `toml:"channel_order"`
	// Mean and Std normalise (v/255 - mean)/std per fed channel; default
	// 0.5 and 0.5.
	Mean []float64 `toml:"mean"`
	Std  []float64 `toml:"std"`
	// MaxBatch bounds the items of one session run when the model splits its
	// own work (the ocr pipeline, or a server batch larger than this); 0
	// means 6, PaddleOCR's default.
	MaxBatch int `toml:"max_batch"`

	norm modelconf.Norm
}

func (b *base) defaults() {
	if b.InputName == "" {
		b.InputName = "x"
	}
	if b.ChannelOrder == "" {
		b.ChannelOrder = "RGB"
	}
	if b.Mean == nil {
		b.Mean = []float64{0.5, 0.5, 0.5}
	}
	if b.Std == nil {
		b.Std = []float64{0.5, 0.5, 0.5}
	}
	if b.MaxBatch == 0 {
		b.MaxBatch = 6
	}
}

func (b *base) validate() error {
	var errs []error
	if b.ModelFile == "" {
		errs = append(errs, errors.New("model_file is required"))
	}
	if b.OutputName == "" {
		errs = append(errs, errors.New("output_name is required (the graph's output tensor)"))
	}
	// Mean and std are on 0..1.
	norm, err := modelconf.ParseNorm(b.ChannelOrder, b.Mean, b.Std, 255)
	errs = append(errs, err)
	b.norm = norm
	if b.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("max_batch %d: must be ≥ 0", b.MaxBatch))
	}
	return errors.Join(errs...)
}

// path resolves a file key by the path rule.
func (b *base) path(p string) string { return b.Path(p) }

func (b *base) session(opts ortOptions) (*ort.Session, error) {
	return ort.NewSession(ort.Config{
		ModelPath:      b.path(b.ModelFile),
		Inputs:         []string{b.InputName},
		Outputs:        []string{b.OutputName},
		IntraOpThreads: opts.threads,
	})
}

type ortOptions struct{ threads int }

// load decodes a model TOML into cfg (a struct embedding base), refusing
// unknown keys so that a typo stops the server instead of being ignored.
func load(path string, cfg interface {
	modelconf.Headed
	common() *base
}) error {
	if err := modelconf.Load(path, cfg); err != nil {
		return err
	}
	cfg.common().defaults()
	return nil
}

func (b *base) common() *base { return b }

// decodeStrict decodes a TOML file, refusing unknown keys, and returns the
// file's absolute directory.
func decodeStrict(path string, v any) (string, error) { return modelconf.Decode(path, v) }

// readLines reads a label or dictionary file, one entry per line.
func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s not found: run `make setup` in the checkout, or fix the path in the model TOML", ort.ErrMissing, path)
		}
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, strings.TrimRight(sc.Text(), "\r\n"))
	}
	return out, sc.Err()
}
