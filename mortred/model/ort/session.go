package ort

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	onnx "github.com/yalue/onnxruntime_go"
)

// Config describes one session.
type Config struct {
	// ModelPath is the .onnx file.
	ModelPath string
	// Inputs and Outputs are the graph's tensor names, in the order Run takes
	// and returns them.
	Inputs, Outputs []string
	// IntraOpThreads is ONNX Runtime's intra-op pool size; 0 means 1, which
	// gives the best throughput on a small machine when several workers run
	// at once (docs: ppocr-notes). Inter-op threads are always 1.
	IntraOpThreads int
}

// Tensor is a float32 tensor in row-major order.
type Tensor struct {
	Shape []int64
	Data  []float32
}

// maxShapeCache bounds the remembered output shapes. Callers round their
// input shapes to a few steps, so this is never reached in practice; past it
// outputs are simply allocated by ONNX Runtime per run.
const maxShapeCache = 512

// Session is one loaded model. Run must not be called concurrently on one
// Session: it reuses its output buffers and run options across calls (one
// Session per worker).
type Session struct {
	cfg  Config
	sess *onnx.DynamicAdvancedSession
	opts *onnx.RunOptions

	// outShapes remembers, per input shape signature, the output shapes, so
	// that later runs write into outBufs instead of fresh allocations.
	outShapes map[string][]onnx.Shape
	outBufs   [][]float32
}

// NewSession loads a model. Init must have succeeded before.
func NewSession(cfg Config) (*Session, error) {
	if !onnx.IsInitialized() {
		return nil, errors.New("ONNX Runtime is not initialised; call ort.Init with the library path first")
	}
	if st, err := os.Stat(cfg.ModelPath); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%w: model file %s not found: run `make setup` in the checkout, or fix the model path in the model TOML", ErrMissing, cfg.ModelPath)
	}
	if len(cfg.Inputs) == 0 || len(cfg.Outputs) == 0 {
		return nil, fmt.Errorf("model %s: input and output names are required", cfg.ModelPath)
	}
	threads := cfg.IntraOpThreads
	if threads <= 0 {
		threads = 1
	}
	so, err := onnx.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("session options: %v", err)
	}
	defer so.Destroy()
	if err := so.SetIntraOpNumThreads(threads); err != nil {
		return nil, fmt.Errorf("intra-op threads %d: %v", threads, err)
	}
	if err := so.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("inter-op threads: %v", err)
	}
	if err := checkNames(cfg); err != nil {
		return nil, err
	}
	sess, err := onnx.NewDynamicAdvancedSession(cfg.ModelPath, cfg.Inputs, cfg.Outputs, so)
	if err != nil {
		return nil, fmt.Errorf("loading model %s: %v", cfg.ModelPath, err)
	}
	ro, err := onnx.NewRunOptions()
	if err != nil {
		sess.Destroy()
		return nil, fmt.Errorf("run options: %v", err)
	}
	return &Session{
		cfg:       cfg,
		sess:      sess,
		opts:      ro,
		outShapes: map[string][]onnx.Shape{},
		outBufs:   make([][]float32, len(cfg.Outputs)),
	}, nil
}

// checkNames fails early, with the names the graph has, when the TOML names a
// tensor the model does not have.
func checkNames(cfg Config) error {
	ins, outs, err := onnx.GetInputOutputInfo(cfg.ModelPath)
	if err != nil {
		return fmt.Errorf("reading model %s: %v", cfg.ModelPath, err)
	}
	has := func(list []onnx.InputOutputInfo, name string) bool {
		for _, i := range list {
			if i.Name == name {
				return true
			}
		}
		return false
	}
	names := func(list []onnx.InputOutputInfo) string {
		var s []string
		for _, i := range list {
			s = append(s, i.Name)
		}
		return strings.Join(s, ", ")
	}
	for _, n := range cfg.Inputs {
		if !has(ins, n) {
			return fmt.Errorf("model %s has no input %q (inputs: %s)", cfg.ModelPath, n, names(ins))
		}
	}
	for _, n := range cfg.Outputs {
		if !has(outs, n) {
			return fmt.Errorf("model %s has no output %q (outputs: %s)", cfg.ModelPath, n, names(outs))
		}
	}
	return nil
}

// Run runs the model on inputs (one per Config.Inputs, in order) and returns
// the outputs in Config.Outputs order. The outputs' Data alias the session's
// buffers: they are valid until the next Run. Inputs' Data are read in place
// (not copied). When ctx ends, the run is terminated and ctx's error
// returned.
func (s *Session) Run(ctx context.Context, inputs []Tensor) ([]Tensor, error) {
	if len(inputs) != len(s.cfg.Inputs) {
		return nil, fmt.Errorf("model %s takes %d inputs, got %d", s.cfg.ModelPath, len(s.cfg.Inputs), len(inputs))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ins := make([]onnx.Value, len(inputs))
	defer destroyAll(ins)
	key := make([]byte, 0, 64)
	for i, in := range inputs {
		t, err := onnx.NewTensor(onnx.NewShape(in.Shape...), in.Data)
		if err != nil {
			return nil, fmt.Errorf("input %s: %v", s.cfg.Inputs[i], err)
		}
		ins[i] = t
		for _, d := range in.Shape {
			key = strconv.AppendInt(key, d, 10)
			key = append(key, ',')
		}
		key = append(key, ';')
	}

	outs := make([]onnx.Value, len(s.cfg.Outputs))
	defer destroyAll(outs)
	shapes, known := s.outShapes[string(key)]
	if known {
		for i, sh := range shapes {
			n := int(sh.FlattenedSize())
			if cap(s.outBufs[i]) < n {
				s.outBufs[i] = make([]float32, n)
			}
			t, err := onnx.NewTensor(sh, s.outBufs[i][:n])
			if err != nil {
				return nil, fmt.Errorf("output %s: %v", s.cfg.Outputs[i], err)
			}
			outs[i] = t
		}
	}

	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = s.opts.Terminate()
		close(fired)
	})
	err := s.sess.RunWithOptions(ins, outs, s.opts)
	if !stop() {
		// The terminate flag is set (or being set): clear it after the
		// setter is done, so the next run starts clean.
		<-fired
		_ = s.opts.UnsetTerminate()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("model run cancelled: %w", cerr)
		}
	}
	if err != nil {
		if known {
			// A model whose output shape depends on the data, not only on
			// the input shape: stop guessing for this shape.
			delete(s.outShapes, string(key))
		}
		return nil, fmt.Errorf("running model %s: %v", s.cfg.ModelPath, err)
	}

	res := make([]Tensor, len(outs))
	for i, v := range outs {
		t, ok := v.(*onnx.Tensor[float32])
		if !ok {
			return nil, fmt.Errorf("model %s output %s is not a float32 tensor", s.cfg.ModelPath, s.cfg.Outputs[i])
		}
		res[i] = Tensor{Shape: []int64(t.GetShape()), Data: t.GetData()}
	}
	if !known && len(s.outShapes) < maxShapeCache {
		sh := make([]onnx.Shape, len(res))
		for i, r := range res {
			sh[i] = onnx.NewShape(r.Shape...)
		}
		s.outShapes[string(key)] = sh
	}
	return res, nil
}

func destroyAll(vs []onnx.Value) {
	for _, v := range vs {
		if v != nil {
			_ = v.Destroy()
		}
	}
}

// Close releases the session.
func (s *Session) Close() error {
	if s.sess == nil {
		return nil
	}
	err := s.sess.Destroy()
	_ = s.opts.Destroy()
	s.sess, s.opts = nil, nil
	return err
}
