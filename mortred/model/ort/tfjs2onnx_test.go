package ort

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

// The converter of scripts/tfjs2onnx is Python (Debian has python3-onnx but
// no ONNX Runtime for Python), so its end-to-end check lives here: cases.py
// builds TF.js graphs using every supported op, converts them and computes
// the expected outputs with numpy from TF's own op definitions; this test
// runs each converted graph in ONNX Runtime through our wrapper.

const debPython = "/usr/bin/python3" // Debian's, where python3-onnx is

func converterDir(t *testing.T) string {
	t.Helper()
	root := orttest.RepoRoot()
	if root == "" {
		t.Fatal("no go.mod above the working directory")
	}
	return filepath.Join(root, "scripts", "tfjs2onnx")
}

func TestTFJSConverterUnitTests(t *testing.T) {
	cmd := exec.Command(debPython, "-m", "unittest", "-v", "test_tfjs2onnx")
	cmd.Dir = converterDir(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests of tfjs2onnx (need python3-onnx, python3-numpy: make setup-deb): %v\n%s", err, out)
	}
}

func TestTFJSConvertedGraphsMatchNumpy(t *testing.T) {
	if err := Init(orttest.Lib(t)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(debPython, filepath.Join(converterDir(t), "cases.py"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cases.py (needs python3-onnx, python3-numpy: make setup-deb): %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name, Input, Output string
		InShape             []int64 `json:"in_shape"`
		WantShape           []int64 `json:"want_shape"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 4 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			s, err := NewSession(Config{ModelPath: filepath.Join(dir, c.Name+".onnx"), Inputs: []string{c.Input}, Outputs: []string{c.Output}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			in := readF32(t, filepath.Join(dir, c.Name+".in.f32"))
			want := readF32(t, filepath.Join(dir, c.Name+".want.f32"))
			out, err := s.Run(context.Background(), []Tensor{{Shape: c.InShape, Data: in}})
			if err != nil {
				t.Fatal(err)
			}
			got := out[0]
			if !equalShape(got.Shape, c.WantShape) {
				t.Fatalf("output shape %v, want %v", got.Shape, c.WantShape)
			}
			var spread float64
			for i := range want {
				spread = max(spread, math.Abs(float64(want[i]-want[0])))
				if d := math.Abs(float64(got.Data[i] - want[i])); d > 1e-4+1e-4*math.Abs(float64(want[i])) {
					t.Fatalf("output[%d] = %v, numpy says %v", i, got.Data[i], want[i])
				}
			}
			// A constant answer would match a broken graph as well.
			if spread < 1e-2 {
				t.Fatalf("expected outputs barely vary (%v): the case tests nothing", spread)
			}
		})
	}
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
