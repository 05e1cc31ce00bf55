package ort

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func clsSession(t *testing.T) *Session {
	t.Helper()
	if err := Init(orttest.Lib(t)); err != nil {
		t.Fatal(err)
	}
	dir := orttest.ModelDir(t)
	s, err := NewSession(Config{
		ModelPath: filepath.Join(dir, "ppocr", "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
		Inputs:    []string{"x"},
		Outputs:   []string{"softmax_0.tmp_0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestInitTwiceAndOtherPath(t *testing.T) {
	lib := orttest.Lib(t)
	if err := Init(lib); err != nil {
		t.Fatal(err)
	}
	if err := Init(lib); err != nil {
		t.Fatalf("second Init with the same path: %v", err)
	}
	if v := Version(); !strings.HasPrefix(v, "1.") {
		t.Fatalf("version %q", v)
	}
	other := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	if err := os.Symlink(lib, other); err != nil {
		t.Fatal(err)
	}
	if err := Init(other); err == nil || !strings.Contains(err.Error(), "already loaded") {
		t.Fatalf("Init with another path: %v", err)
	}
}

func TestMissingFilesSayHowToGetThem(t *testing.T) {
	err := Init(filepath.Join(t.TempDir(), "nope.so"))
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("missing library: %v", err)
	}
	if err := Init(orttest.Lib(t)); err != nil {
		t.Fatal(err)
	}
	_, err = NewSession(Config{ModelPath: filepath.Join(t.TempDir(), "x.onnx"), Inputs: []string{"x"}, Outputs: []string{"y"}})
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "make setup") {
		t.Fatalf("missing model: %v", err)
	}
	dir := orttest.ModelDir(t)
	_, err = NewSession(Config{ModelPath: filepath.Join(dir, "ppocr", "ch_ppocr_mobile_v2.0_cls_infer.onnx"), Inputs: []string{"input"}, Outputs: []string{"softmax_0.tmp_0"}})
	if err == nil || !strings.Contains(err.Error(), `no input "input"`) || !strings.Contains(err.Error(), "x") {
		t.Fatalf("wrong input name: %v", err)
	}
}

func TestRunReusesOutputBuffers(t *testing.T) {
	s := clsSession(t)
	var b Batch
	ctx := context.Background()
	in := b.Reset(2, 3, 48, 192)
	out1, err := s.Run(ctx, []Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	if got := out1[0].Shape; len(got) != 2 || got[0] != 2 || got[1] != 2 {
		t.Fatalf("output shape %v", got)
	}
	first := append([]float32(nil), out1[0].Data...)
	in2 := b.Reset(2, 3, 48, 192)
	if &in2.Data[0] != &in.Data[0] {
		t.Fatal("input buffer was reallocated for the same shape")
	}
	out2, err := s.Run(ctx, []Tensor{in2})
	if err != nil {
		t.Fatal(err)
	}
	out3, err := s.Run(ctx, []Tensor{in2})
	if err != nil {
		t.Fatal(err)
	}
	if &out2[0].Data[0] != &out3[0].Data[0] {
		t.Fatal("output buffer not reused for a known shape")
	}
	for i := range first {
		if d := first[i] - out3[0].Data[i]; d > 1e-5 || d < -1e-5 {
			t.Fatalf("output %d: %v then %v", i, first[i], out3[0].Data[i])
		}
	}
	// Softmax rows sum to one.
	for r := 0; r < 2; r++ {
		sum := out3[0].Data[2*r] + out3[0].Data[2*r+1]
		if sum < 0.99 || sum > 1.01 {
			t.Fatalf("row %d sums to %v", r, sum)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	s := clsSession(t)
	var b Batch
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, []Tensor{b.Reset(1, 3, 48, 192)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	// The session still works afterwards.
	if _, err := s.Run(context.Background(), []Tensor{b.Reset(1, 3, 48, 192)}); err != nil {
		t.Fatal(err)
	}
}

func TestRunBadShapeIsAnError(t *testing.T) {
	s := clsSession(t)
	var b Batch
	if _, err := s.Run(context.Background(), []Tensor{b.Reset(1, 1, 48, 192)}); err == nil {
		t.Fatal("one channel instead of three: no error")
	}
	if _, err := s.Run(context.Background(), nil); err == nil {
		t.Fatal("no inputs: no error")
	}
}

func TestRunCancelledMidway(t *testing.T) {
	if err := Init(orttest.Lib(t)); err != nil {
		t.Fatal(err)
	}
	s, err := NewSession(Config{
		ModelPath: filepath.Join(orttest.ModelDir(t), "ppocr", "ch_PP-OCRv4_det_infer.onnx"),
		Inputs:    []string{"x"},
		Outputs:   []string{"sigmoid_0.tmp_0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b Batch
	// A 1920×1920 detection takes about a second here; cancel well before.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, err = s.Run(ctx, []Tensor{b.Reset(1, 3, 1920, 1920)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run cancelled midway: %v (after %v)", err, time.Since(start))
	}
	if _, err := s.Run(context.Background(), []Tensor{b.Reset(1, 3, 64, 64)}); err != nil {
		t.Fatalf("run after a terminated run: %v", err)
	}
}
