"""Unit tests of tfjs2onnx that need no ONNX runtime: the JS wrapper parser,
weight decoding, the checker, and the refusals. The numeric check of the
converted graphs runs in ONNX Runtime from Go (mortred/model/ort)."""
import base64
import json
import os
import tempfile
import unittest

import numpy as np
import onnx

import cases
import tfjs2onnx
from tfjs2onnx import ConversionError


class JSWrapper(unittest.TestCase):
    def test_minified_literal(self):
        src = 'x(function(){return{1:[function(t,e,a){e.exports={a:1,"b":[.5,-.25,1e-3,!0,!1,null],c:{d:"q\\"\\u0041"}}},{}]}});'
        self.assertEqual(tfjs2onnx._exported(src, "m.js"),
                         {"a": 1, "b": [0.5, -0.25, 0.001, True, False, None], "c": {"d": 'q"A'}})

    def test_shard_string(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "s.min.js")
            with open(p, "w") as f:
                f.write('!function(i){}(function(){return{1:[function(i,m,h){m.exports="%s"},{}]}});' % base64.b64encode(b"\x01\x02\x03").decode())
            self.assertEqual(tfjs2onnx.read_shard(p), b"\x01\x02\x03")

    def test_no_export_is_clear(self):
        with self.assertRaisesRegex(ConversionError, "no `exports = <literal>`"):
            tfjs2onnx._exported("var a = 1;", "m.js")


class Weights(unittest.TestCase):
    def test_quantizations(self):
        q8 = np.array([0, 128, 255], np.uint8)
        f16 = np.array([1.5, -2.25], "<f2")
        f32 = np.array([[3.0]], "<f4")
        man = [{"paths": ["a", "b"], "weights": [
            {"name": "q", "shape": [3], "dtype": "float32", "quantization": {"dtype": "uint8", "min": -1.0, "scale": 0.01}},
            {"name": "h", "shape": [2], "dtype": "float32", "quantization": {"dtype": "float16"}},
            {"name": "f", "shape": [1, 1], "dtype": "float32"}]}]
        buf = q8.tobytes() + f16.tobytes() + f32.tobytes()
        w = tfjs2onnx.decode_weights(man, [buf[:4], buf[4:]])  # a weight may span two shard files
        np.testing.assert_allclose(w["q"], [-1.0, 0.28, 1.55], rtol=1e-6)
        np.testing.assert_array_equal(w["h"], [1.5, -2.25])
        np.testing.assert_array_equal(w["f"], [[3.0]])

    def test_leftover_and_short(self):
        man = [{"paths": ["a"], "weights": [{"name": "f", "shape": [2], "dtype": "float32"}]}]
        with self.assertRaisesRegex(ConversionError, "left over"):
            tfjs2onnx.decode_weights(man, [b"\0" * 12])
        with self.assertRaisesRegex(ConversionError, "names 1 shard files, got 2"):
            tfjs2onnx.decode_weights(man, [b"", b""])

    def test_unknown_dtype(self):
        man = [{"paths": ["a"], "weights": [{"name": "s", "shape": [1], "dtype": "string"}]}]
        with self.assertRaisesRegex(ConversionError, "dtype 'string' is not supported"):
            tfjs2onnx.decode_weights(man, [b""])


def tiny(op_patch):
    """A one-conv graph; op_patch edits the conv node."""
    g = cases.Graph(np.random.default_rng(1))
    x = g.placeholder("input", [1, 4, 4, 3])
    g.rand("w", [1, 1, 3, 2])
    g.rand("b", [2])
    node = {"name": "conv", "op": "_FusedConv2D", "input": [x, "w", "b"], "attr": cases.conv_attrs()}
    op_patch(node)
    g.nodes.append(node)
    return g.model(["conv"]), g.shard()


def convert_dict(model, shard, **kw):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "model.json"), "w") as f:
            json.dump(model, f)
        with open(os.path.join(d, "group1-shard1of1"), "wb") as f:
            f.write(shard)
        return tfjs2onnx.convert(os.path.join(d, "model.json"), **kw)


class Refusals(unittest.TestCase):
    def test_unknown_op_names_node_and_supported_list(self):
        def patch(n):
            n["op"] = "Conv3D"
        with self.assertRaisesRegex(ConversionError, r"node conv: op Conv3D is not supported \(supported: .*_FusedConv2D"):
            convert_dict(*tiny(patch))

    def test_unknown_fused_activation(self):
        def patch(n):
            n["attr"]["fused_ops"] = {"list": {"s": [cases.B64("BiasAdd"), cases.B64("Elu")]}}
        with self.assertRaisesRegex(ConversionError, "fused op Elu is not supported"):
            convert_dict(*tiny(patch))

    def test_nchw_data_and_explicit_padding(self):
        def nchw(n):
            n["attr"]["data_format"] = {"s": cases.B64("NCHW")}
        with self.assertRaisesRegex(ConversionError, "data_format NCHW is not supported"):
            convert_dict(*tiny(nchw))

        def explicit(n):
            n["attr"]["padding"] = {"s": cases.B64("EXPLICIT")}
        with self.assertRaisesRegex(ConversionError, "padding EXPLICIT is not supported"):
            convert_dict(*tiny(explicit))

    def test_mean_over_computed_axes(self):
        model, shard, _, _ = cases.mobilenetv3_like(np.random.default_rng(3))
        for n in model["modelTopology"]["node"]:
            if n["name"] == "se_m":
                n["input"] = ["c", "c"]  # axes from a value, not a constant
        with self.assertRaisesRegex(ConversionError, "node se_m: want the mean of a value over constant axes"):
            convert_dict(model, shard)

    def test_cli_exit_code_and_message(self):
        model, shard = tiny(lambda n: n.update(op="Conv3D"))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "model.json"), "w") as f:
                json.dump(model, f)
            with open(os.path.join(d, "group1-shard1of1"), "wb") as f:
                f.write(shard)
            out = os.path.join(d, "out.onnx")
            self.assertEqual(tfjs2onnx.main([os.path.join(d, "model.json"), out]), 2)
            self.assertFalse(os.path.exists(out))


class NumpyReference(unittest.TestCase):
    """The op definitions the converted graphs are checked against."""

    def test_conv_transpose_is_the_adjoint_of_conv(self):
        rng = np.random.default_rng(3)
        for out_hw, s, pad in (((12, 12), 2, "SAME"), ((11, 7), 2, "SAME"), ((9, 9), 1, "SAME"), ((9, 11), 2, "VALID")):
            w = rng.standard_normal((3, 3, 2, 4))  # conv from 2 to 4 channels; its transpose from 4 to 2
            y = rng.standard_normal((1, out_hw[0], out_hw[1], 2))
            cy = cases.ref_conv(y, w, 0, (s, s), pad)
            x = rng.standard_normal(cy.shape)
            ctx = cases.ref_conv_transpose(x, w, out_hw, (s, s), pad)
            self.assertEqual(ctx.shape, y.shape)
            self.assertAlmostEqual(float((cy * x).sum()), float((y * ctx).sum()), places=8)

    def test_resize_bilinear_modes(self):
        x = np.array([0.0, 1.0]).reshape(1, 1, 2, 1)
        got = lambda **kw: cases.ref_resize_bilinear(x, (1, 4), **kw)[0, 0, :, 0].tolist()  # noqa: E731
        self.assertEqual(got(half_pixel=True), [0.0, 0.25, 0.75, 1.0])
        self.assertEqual(got(), [0.0, 0.5, 1.0, 1.0])
        self.assertEqual(cases.ref_resize_bilinear(x, (1, 3), align_corners=True)[0, 0, :, 0].tolist(), [0.0, 0.5, 1.0])


class Output(unittest.TestCase):
    def test_checker_and_layouts(self):
        model, shard = tiny(lambda n: None)
        for nchw in (False, True):
            m = convert_dict(model, shard, nchw_input=nchw)
            onnx.checker.check_model(m)
            dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
            self.assertEqual(dims, [1, 3, 4, 4] if nchw else [1, 4, 4, 3])
            self.assertEqual(m.graph.output[0].name, "conv")

    def test_deterministic(self):
        model, shard = tiny(lambda n: None)
        self.assertEqual(convert_dict(model, shard).SerializeToString(), convert_dict(model, shard).SerializeToString())


if __name__ == "__main__":
    unittest.main()
