"""Unit tests of ncnn2onnx that need no ONNX runtime: parsing, weight
tags and the refusals. The numeric check runs in ONNX Runtime from Go."""
import unittest

import numpy as np
import onnx

import ncnn_cases as cases
import ncnn2onnx
from ncnn2onnx import ConversionError


def model():
    text, data, _, _ = cases.compact(np.random.default_rng(1))
    return text, data


class Convert(unittest.TestCase):
    def test_checker_and_dynamic_shape(self):
        m = ncnn2onnx.convert(*model())
        onnx.checker.check_model(m)
        dims = m.graph.input[0].type.tensor_type.shape.dim
        self.assertEqual([d.dim_param or d.dim_value for d in dims], ["N", 3, "H", "W"])
        self.assertEqual(m.graph.output[0].name, "output")

    def test_deterministic(self):
        self.assertEqual(ncnn2onnx.convert(*model()).SerializeToString(), ncnn2onnx.convert(*model()).SerializeToString())

    def test_pixel_shuffle_reference_matches_depth_to_space_crd(self):
        x = np.arange(2 * 8 * 2 * 3).reshape(2, 8, 2, 3)
        y = cases.pixel_shuffle(x, 2)
        # out[n, c, h*r+i, w*r+j] = in[n, c*r*r + i*r + j, h, w]
        self.assertEqual(y[1, 1, 3, 4], x[1, 1 * 4 + 1 * 2 + 0, 1, 2])


class Refusals(unittest.TestCase):
    def test_unknown_layer(self):
        text, data = model()
        with self.assertRaisesRegex(ConversionError, r"layer p0: type Sigmoid is not supported \(supported: Input, Split"):
            ncnn2onnx.convert(text.replace("PReLU        p0", "Sigmoid      p0"), data)

    def test_bad_magic_leftover_and_short(self):
        text, data = model()
        with self.assertRaisesRegex(ConversionError, "magic 7767517"):
            ncnn2onnx.convert("1\n" + text, data)
        with self.assertRaisesRegex(ConversionError, "4 bytes left over"):
            ncnn2onnx.convert(text, data + b"\0" * 4)
        with self.assertRaisesRegex(ConversionError, "ends inside"):
            ncnn2onnx.convert(text, data[:-8])

    def test_int8_weights_and_unknown_params(self):
        text, data = model()
        with self.assertRaisesRegex(ConversionError, "weight storage tag 0x2 is not supported"):
            ncnn2onnx.convert(text, b"\x02\0\0\0" + data[4:])
        with self.assertRaisesRegex(ConversionError, "layer c1: parameters 19=1 are not supported"):
            ncnn2onnx.convert(text.replace("6=225", "6=225 19=1"), data)
        with self.assertRaisesRegex(ConversionError, "only nearest interpolation"):
            ncnn2onnx.convert(text.replace("0=1 1=2", "0=2 1=2"), data)

    def test_rrdb_layers_outside_what_the_models_use(self):
        text, data, _, _ = cases.rrdb(np.random.default_rng(1))
        ncnn2onnx.convert(text, data)
        for old, new, msg in [
            ("0=1 -23301", "0=0 -23301", r"layer res: only the weighted sum \(0=1\)"),
            ("-23301=2,2.000000e-01,1.000000e+00", "-23301=1,2.000000e-01", r"layer res: only the weighted sum"),
            ("-23301=2,2.000000e-01,", "-23301=3,2.000000e-01,", r"layer res: array parameter -23301=3,.*count does not match"),
            ("cat      2 1 a1 b c 0=0", "cat      2 1 a1 b c 0=1", r"layer cat: only the concatenation along channels"),
            ("9=2 -23310=1,2.000000e-01", "9=1", r"layer c1: fused activation 1 \[\] is not supported"),
            ("9=2 -23310=1,2.000000e-01", "9=2", r"layer c1: fused activation 2 \[\] is not supported"),
            ("9=2 -23310=1,2.000000e-01", "9=2 -23310=2,2.000000e-01,6.0", r"layer c1: fused activation 2 \[0.2, 6.0\]"),
            ("0=0", "0=0 -5=1", r"layer cat: parameter -5=1 is not supported"),
        ]:
            self.assertIn(old, text)
            with self.assertRaisesRegex(ConversionError, msg):
                ncnn2onnx.convert(text.replace(old, new, 1), data)

    def test_cli_exit_code(self):
        import os
        import tempfile
        text, data = model()
        with tempfile.TemporaryDirectory() as d:
            p, b, out = os.path.join(d, "m.param"), os.path.join(d, "m.bin"), os.path.join(d, "m.onnx")
            with open(p, "w") as f:
                f.write(text.replace("Interp", "Crop  "))
            with open(b, "wb") as f:
                f.write(data)
            self.assertEqual(ncnn2onnx.main([p, b, out]), 2)
            self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
