package ort

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/modeltest"
	"github.com/fe64bb06/frontdoor/mortred/model/ort/orttest"
)

// The converter of scripts/tfjs2onnx is Python (Debian has python3-onnx but
// no ONNX Runtime for Python), so its end-to-end check lives here: cases.py
// builds TF.js graphs using every supported op, converts them and computes
// the expected outputs with numpy from TF's own op definitions; this test
// runs each converted graph in ONNX Runtime through our wrapper.

const debPython = "/usr/bin/python3" // Debian's, where python3-onnx is

func scriptDir(t *testing.T, name string) string {
	t.Helper()
	root := orttest.RepoRoot()
	if root == "" {
		t.Fatal("no go.mod above the working directory")
	}
	return filepath.Join(root, "scripts", name)
}

func converterDir(t *testing.T) string { return scriptDir(t, "tfjs2onnx") }

func TestConverterUnitTests(t *testing.T) {
	for _, c := range []struct{ dir, module string }{{"tfjs2onnx", "test_tfjs2onnx"}, {"ncnn2onnx", "test_ncnn2onnx"}} {
		cmd := exec.Command(debPython, "-m", "unittest", "-v", c.module)
		cmd.Dir = scriptDir(t, c.dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python unit tests of %s (need python3-onnx, python3-numpy: make setup-deb): %v\n%s", c.dir, err, out)
		}
	}
}

func TestTFJSConvertedGraphsMatchNumpy(t *testing.T) {
	convertedMatchNumpy(t, filepath.Join(converterDir(t), "cases.py"), 4)
}

// TestNCNNConvertedModelsMatchNumpy is the same check for ncnn2onnx.
func TestNCNNConvertedModelsMatchNumpy(t *testing.T) {
	convertedMatchNumpy(t, filepath.Join(scriptDir(t, "ncnn2onnx"), "ncnn_cases.py"), 1)
}

// convertedMatchNumpy runs a case generator and each converted graph.
func convertedMatchNumpy(t *testing.T, script string, minCases int) {
	if err := Init(orttest.Lib(t)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(debPython, script, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s (needs python3-onnx, python3-numpy: make setup-deb): %v\n%s", filepath.Base(script), err, out)
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
	if len(cases) < minCases {
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

// TestTFJSRealModelsMatchNumpy checks the converted graphs that
// setup-models serves against reference.py's numpy evaluation of the TF.js
// graph each came from (kept next to it), on a real photograph.
func TestTFJSRealModelsMatchNumpy(t *testing.T) {
	if err := Init(orttest.Lib(t)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		base, source, input, output string
		size, outLen                int
		tfNCHW                      bool    // the TF graph's own input is NCHW (an ONNX → TF export)
		tfOutput                    string  // the TF node output is, when not the signature's first
		scale                       float32 // pixel values are 0..scale (the model's own range)
	}{
		{"nsfwjs/mobilenet_v2_mid", "model.min.js", "input", "Identity", 224, 5, false, "", 1},
		{"selfie/selfie", "selfie.json", "input_1", "activation_10", 256, 256 * 256, false, "", 1},
		{"nanodet/nanodet", "nanodet.json", "input_1", "Identity_2", 416, 169 * 80, true, "", 1},
		// Cut at its heads: the signature's first output is the graph's
		// own decoder, which the conversion leaves out.
		{"centernet/centernet", "centernet.json", "tower_0_images", "tower_0_keypoints", 512, 128 * 128 * 80, false, "tower_0/keypoints", 255},
	} {
		t.Run(c.base, func(t *testing.T) {
			base := filepath.Join(orttest.ModelDir(t), c.base)
			img, err := imageio.Decode(modeltest.Photo(t, "astronaut.png"), 0)
			if err != nil {
				t.Fatal(err)
			}
			img = img.Resize(c.size, c.size)
			n := c.size * c.size
			nchw := make([]float32, 3*n)
			tf := make([]byte, 4*3*n) // the input in the TF graph's axis order
			for i := range n {
				for ch := range 3 {
					v := float32(img.Pix[3*i+ch]) / 255 * c.scale
					nchw[ch*n+i] = v
					at := 3*i + ch
					if c.tfNCHW {
						at = ch*n + i
					}
					binary.LittleEndian.PutUint32(tf[4*at:], math.Float32bits(v))
				}
			}
			dir := t.TempDir()
			in, want := filepath.Join(dir, "in.f32"), filepath.Join(dir, "want.f32")
			if err := os.WriteFile(in, tf, 0o600); err != nil {
				t.Fatal(err)
			}
			side := strconv.Itoa(c.size)
			dims := []string{"1", side, side, "3"}
			if c.tfNCHW {
				dims = []string{"1", "3", side, side}
			}
			args := append(append([]string{filepath.Join(converterDir(t), "reference.py"), filepath.Join(base+".tfjs", c.source), in}, dims...), want)
			if c.tfOutput != "" {
				args = append(args, "--output", c.tfOutput)
			}
			cmd := exec.Command(debPython, args...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("reference.py (the TF.js sources come with `make setup-models`): %v\n%s", err, out)
			}
			s, err := NewSession(Config{ModelPath: base + ".onnx", Inputs: []string{c.input}, Outputs: []string{c.output}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			out, err := s.Run(context.Background(), []Tensor{{Shape: []int64{1, 3, int64(c.size), int64(c.size)}, Data: nchw}})
			if err != nil {
				t.Fatal(err)
			}
			ref := readF32(t, want)
			if len(ref) != c.outLen || len(out[0].Data) != c.outLen {
				t.Fatalf("outputs: ORT %d values, numpy %d, want %d", len(out[0].Data), len(ref), c.outLen)
			}
			var worst, spread float64
			for i := range ref {
				worst = max(worst, math.Abs(float64(out[0].Data[i]-ref[i])))
				spread = max(spread, math.Abs(float64(ref[i]-ref[0])))
			}
			if worst > 1e-4 {
				t.Fatalf("ONNX Runtime and numpy differ by up to %v", worst)
			}
			// A constant answer (an input in the wrong range) would match
			// a broken graph as well.
			if spread < 0.1 {
				t.Fatalf("numpy's outputs barely vary (%v): the check tests nothing", spread)
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
