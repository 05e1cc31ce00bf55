#!/usr/bin/python3
"""Test graphs for tfjs2onnx: small TF.js graph models that use every op the
converter supports, their conversion, and the expected outputs computed
straight from TensorFlow's definitions of those ops in numpy (NHWC, TF's SAME
padding), independent of how the converter maps them to ONNX.

`cases.py OUTDIR` writes, per case, CASE.onnx, CASE.in.f32 and
CASE.want.f32 (little-endian float32) and one OUTDIR/cases.json describing
them; the Go test (mortred/model/ort) runs each .onnx in ONNX Runtime and
compares. Python has no ONNX runtime on Debian, hence the split.
"""
import base64
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfjs2onnx  # noqa: E402

B64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731


class Graph:
    """Builds a model.json dict and its shard bytes."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.weights, self.buf, self.vals = [], [], [], {}

    def placeholder(self, name, shape):
        self.nodes.append({"name": name, "op": "Placeholder", "attr": {
            "dtype": {"type": "DT_FLOAT"}, "shape": {"shape": {"dim": [{"size": str(d)} for d in shape]}}}})
        return name

    def const(self, name, arr, quant=None):
        """quant: None (float32, or int32 for integer arrays), "uint8" or
        "float16"."""
        if np.asarray(arr).dtype.kind == "i":
            arr = np.asarray(arr, "<i4")
            self.weights.append({"name": name, "shape": list(arr.shape), "dtype": "int32"})
            self.buf.append(arr.tobytes())
            self.nodes.append({"name": name, "op": "Const", "attr": {"value": {"tensor": {}}, "dtype": {"type": "DT_INT32"}}})
            self.vals[name] = arr
            return name
        arr = np.asarray(arr, np.float32)
        w = {"name": name, "shape": list(arr.shape), "dtype": "float32"}
        if quant == "uint8":
            lo, hi = float(arr.min()), float(arr.max())
            scale = (hi - lo) / 255 or 1.0
            q = np.round((arr - lo) / scale).astype(np.uint8)
            w["quantization"] = {"dtype": "uint8", "min": lo, "scale": scale}
            self.buf.append(q.tobytes())
            arr = q.astype(np.float32) * np.float32(scale) + np.float32(lo)
        elif quant == "float16":
            h = arr.astype("<f2")
            w["quantization"] = {"dtype": "float16"}
            self.buf.append(h.tobytes())
            arr = h.astype(np.float32)
        else:
            self.buf.append(arr.astype("<f4").tobytes())
        self.weights.append(w)
        self.nodes.append({"name": name, "op": "Const", "attr": {"value": {"tensor": {}}, "dtype": {"type": "DT_FLOAT"}}})
        self.vals[name] = arr  # what the graph really holds, after quantization
        return name

    def rand(self, name, shape, quant=None, scale=0.5):
        return self.const(name, self.rng.standard_normal(shape).astype(np.float32) * scale, quant)

    def op(self, name, op, inputs, **attr):
        self.nodes.append({"name": name, "op": op, "input": inputs, "attr": attr})
        return name

    def model(self, outputs):
        return {"format": "graph-model", "modelTopology": {"node": self.nodes},
                "userDefinedMetadata": {"signature": {"outputs": {o + ":0": {"name": o + ":0"} for o in outputs}}},
                "weightsManifest": [{"paths": ["group1-shard1of1"], "weights": self.weights}]}

    def shard(self):
        return b"".join(self.buf)


def ints(*v):
    return {"list": {"i": [str(x) for x in v]}}


def conv_attrs(strides=(1, 1), padding="SAME", fused=("BiasAdd",), dil=(1, 1)):
    return {"strides": ints(1, *strides, 1), "dilations": ints(1, *dil, 1), "padding": {"s": B64(padding)},
            "data_format": {"s": B64("NHWC")}, "num_args": {"i": "1"},
            "fused_ops": {"list": {"s": [B64(f) for f in fused]}}}


# ---------------------------------------------------------- numpy reference

def same_pads(n, k, s, d):
    out = -(-n // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
    return out, total // 2, total - total // 2


def ref_conv(x, w, b, strides, padding, dil=(1, 1), depthwise=False):
    """TF Conv2D / DepthwiseConv2dNative on NHWC x, HWIO (or HWCM) w."""
    n, h, wd, c = x.shape
    kh, kw = w.shape[:2]
    if padding == "SAME":
        oh, pt, pb = same_pads(h, kh, strides[0], dil[0])
        ow, pl, pr = same_pads(wd, kw, strides[1], dil[1])
    else:
        oh = (h - (kh - 1) * dil[0] - 1) // strides[0] + 1
        ow = (wd - (kw - 1) * dil[1] - 1) // strides[1] + 1
        pt = pb = pl = pr = 0
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    cout = w.shape[2] * w.shape[3] if depthwise else w.shape[3]
    out = np.zeros((n, oh, ow, cout))
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dil[0], j * dil[1]
            patch = xp[:, y0:y0 + strides[0] * oh:strides[0], x0:x0 + strides[1] * ow:strides[1], :]
            if depthwise:
                out += (patch[..., :, None] * w[i, j][None, None, None]).reshape(n, oh, ow, cout)
            else:
                out += patch @ w[i, j].astype(np.float64)
    return out + b


def ref_conv_transpose(x, w, out_hw, strides, padding):
    """TF Conv2DBackpropInput: the adjoint of Conv2D(w) from an out_hw image
    to x's size; w is [kh, kw, out_channels, in_channels]."""
    n, ih, iw, _ = x.shape
    kh, kw = w.shape[:2]
    pads = []
    for o, i, k, s in zip(out_hw, (ih, iw), (kh, kw), strides):
        total = max((i - 1) * s + k - o, 0) if padding == "SAME" else 0
        pads.append(total // 2)
    out = np.zeros((n, out_hw[0] + 2 * kh + strides[0] * ih, out_hw[1] + 2 * kw + strides[1] * iw, w.shape[2]))
    for a in range(kh):
        for b in range(kw):
            contrib = x.astype(np.float64) @ w[a, b].T.astype(np.float64)  # [n, ih, iw, out]
            out[:, a:a + strides[0] * ih:strides[0], b:b + strides[1] * iw:strides[1]] += contrib
    return out[:, pads[0]:pads[0] + out_hw[0], pads[1]:pads[1] + out_hw[1]]


def ref_resize_bilinear(x, size, align_corners=False, half_pixel=False):
    """TF ResizeBilinear on NHWC x."""
    def axis(n_in, n_out):
        d = np.arange(n_out, dtype=np.float64)
        if align_corners and n_out > 1:
            src = d * (n_in - 1) / (n_out - 1)
        elif half_pixel:
            src = (d + 0.5) * n_in / n_out - 0.5
        else:
            src = d * n_in / n_out
        lo = np.floor(src)
        frac = src - lo
        return np.clip(lo, 0, n_in - 1).astype(int), np.clip(lo + 1, 0, n_in - 1).astype(int), frac
    y0, y1, fy = axis(x.shape[1], size[0])
    x0, x1, fx = axis(x.shape[2], size[1])
    top = x[:, y0][:, :, x0] * (1 - fx)[None, None, :, None] + x[:, y0][:, :, x1] * fx[None, None, :, None]
    bot = x[:, y1][:, :, x0] * (1 - fx)[None, None, :, None] + x[:, y1][:, :, x1] * fx[None, None, :, None]
    return top * (1 - fy)[None, :, None, None] + bot * fy[None, :, None, None]


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def relu6(x):
    return np.clip(x, 0, 6)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------- cases

def mobilenet_like(rng):
    """Every supported op in one small MobileNetV2-shaped graph."""
    g = Graph(rng)
    x = g.placeholder("input", [-1, 8, 8, 3])
    g.const("two", 2.0)
    g.const("one", 1.0)
    g.op("scaled", "Mul", [x, "two"])
    g.op("centred", "Sub", ["scaled", "one"])
    g.rand("c1_w", [3, 3, 3, 4], "uint8")
    g.rand("c1_b", [4], "uint8")
    g.op("c1", "_FusedConv2D", ["centred", "c1_w", "c1_b"], **conv_attrs((2, 2), "SAME", ("BiasAdd", "Relu6")))
    g.rand("dw_w", [3, 3, 4, 2], "float16")
    g.rand("dw_b", [8])
    g.op("dw", "FusedDepthwiseConv2dNative", ["c1", "dw_w", "dw_b"], **conv_attrs((1, 1), "SAME", ("BiasAdd", "Relu6"), (2, 2)))
    g.rand("pj_w", [1, 1, 8, 4])
    g.rand("pj_b", [4])
    g.op("pj", "_FusedConv2D", ["dw", "pj_w", "pj_b"], **conv_attrs((1, 1), "VALID"))
    g.op("res", "AddV2", ["pj", "c1"])
    g.rand("chan", [4])
    g.op("biased", "AddV2", ["res", "chan"])
    g.rand("c2_w", [3, 3, 4, 6])
    g.rand("c2_b", [6])
    g.op("c2", "_FusedConv2D", ["biased", "c2_w", "c2_b"], **conv_attrs((1, 1), "VALID", ("BiasAdd", "Relu")))
    g.op("pool", "AvgPool", ["c2"], ksize=ints(1, 2, 2, 1), strides=ints(1, 2, 2, 1),
         padding={"s": B64("VALID")}, data_format={"s": B64("NHWC")})
    g.op("flat", "Squeeze", ["pool"], squeeze_dims=ints(1, 2))
    g.rand("fc_w", [6, 5], "uint8")
    g.rand("fc_b", [5])
    g.op("fc", "_FusedMatMul", ["flat", "fc_w", "fc_b"], fused_ops={"list": {"s": [B64("BiasAdd")]}},
         transpose_a={"b": False}, transpose_b={"b": False}, num_args={"i": "1"})
    g.op("prob", "Softmax", ["fc"])
    g.op("Identity", "Identity", ["prob"])
    model = g.model(["Identity"])

    def ref(xin):
        v = g.vals
        t = xin * v["two"] - v["one"]
        t = c1 = relu6(ref_conv(t, v["c1_w"], v["c1_b"], (2, 2), "SAME"))
        t = relu6(ref_conv(t, v["dw_w"], v["dw_b"], (1, 1), "SAME", (2, 2), depthwise=True))
        t = ref_conv(t, v["pj_w"], v["pj_b"], (1, 1), "VALID") + c1 + v["chan"]
        t = np.maximum(ref_conv(t, v["c2_w"], v["c2_b"], (1, 1), "VALID"), 0)  # 2×2
        t = t.reshape(t.shape[0], 1, 2, 1, 2, 6).mean(axis=(2, 4)).reshape(t.shape[0], 6)
        return softmax(t @ v["fc_w"] + v["fc_b"])
    return model, g.shard(), ref, [2, 8, 8, 3]


def conv_map(rng):
    """A 4-D output (turned back to NHWC at the end), odd sizes, strides 2
    with TF's asymmetric SAME padding on an even and an odd axis."""
    g = Graph(rng)
    x = g.placeholder("image", [-1, 7, 10, 3])
    g.rand("w", [3, 3, 3, 5])
    g.rand("b", [5])
    g.op("conv", "_FusedConv2D", [x, "w", "b"], **conv_attrs((2, 2), "SAME", ("BiasAdd",)))
    g.rand("w2", [2, 2, 5, 1], "uint8")
    g.op("dw", "FusedDepthwiseConv2dNative", ["conv", "w2", "b"], **conv_attrs((2, 1), "SAME", ("BiasAdd", "Relu")))
    model = g.model(["dw"])

    def ref(xin):
        v = g.vals
        t = ref_conv(xin, v["w"], v["b"], (2, 2), "SAME")
        return np.maximum(ref_conv(t, v["w2"], v["b"], (2, 1), "SAME", depthwise=True), 0)
    return model, g.shard(), ref, [3, 7, 10, 3]


def segmenter_like(rng):
    """The ops of MediaPipe's selfie segmenter: unfused convolutions,
    hard-swish, squeeze-excite, AddN, bilinear up-sampling (both modes) and
    a transposed convolution back to the input size. The placeholder fixes
    batch 1 as the real graph does; converted with dynamic batch, it runs
    on 2."""
    g = Graph(rng)
    x = g.placeholder("input_1", [1, 12, 12, 3])
    g.rand("c1_w", [3, 3, 3, 4], "float16")
    g.op("c1", "Conv2D", [x, "c1_w"], **{k: v for k, v in conv_attrs((2, 2)).items() if k not in ("fused_ops", "num_args")})
    g.rand("c1_b", [4])
    g.op("c1b", "Add", ["c1", "c1_b"])
    g.const("three", 3.0)
    g.const("sixth", 1 / 6)
    g.op("hs_a", "AddV2", ["c1b", "three"])
    g.op("hs_r", "Relu6", ["hs_a"])
    g.op("hs_m", "Mul", ["sixth", "hs_r"])  # const first, as in the real graph
    g.op("hs", "Mul", ["c1b", "hs_m"])
    g.rand("dw_w", [3, 3, 4, 1])
    g.op("dw", "DepthwiseConv2dNative", ["hs", "dw_w"], **{k: v for k, v in conv_attrs((1, 1)).items() if k not in ("fused_ops", "num_args")})
    g.op("dwr", "Relu", ["dw"])
    g.op("se_p", "AvgPool", ["dwr"], ksize=ints(1, 6, 6, 1), strides=ints(1, 6, 6, 1),
         padding={"s": B64("VALID")}, data_format={"s": B64("NHWC")})
    g.op("se_s", "Sigmoid", ["se_p"])
    g.op("se", "Mul", ["dwr", "se_s"])
    g.op("sum", "AddN", ["se", "hs", "dwr"], N={"i": "3"})
    g.const("up_hw", np.array([9, 9]))
    g.op("up", "ResizeBilinear", ["sum", "up_hw"], half_pixel_centers={"b": True}, align_corners={"b": False})
    g.const("up2_hw", np.array([6, 6]))
    g.op("up2", "ResizeBilinear", ["up", "up2_hw"], half_pixel_centers={"b": False}, align_corners={"b": True})
    g.rand("tw", [3, 3, 2, 4])
    g.const("tshape", np.array([1, 12, 12, 2]))
    g.op("seg", "Conv2DBackpropInput", ["tshape", "tw", "up2"], strides=ints(1, 2, 2, 1), padding={"s": B64("SAME")},
         data_format={"s": B64("NHWC")}, dilations=ints(1, 1, 1, 1))
    g.op("mask", "Sigmoid", ["seg"])
    model = g.model(["mask"])

    def ref(xin):
        v = g.vals
        t = ref_conv(xin, v["c1_w"], 0, (2, 2), "SAME") + v["c1_b"]
        hs = t * (relu6(t + 3) * (1 / 6))
        d = np.maximum(ref_conv(hs, v["dw_w"], 0, (1, 1), "SAME", depthwise=True), 0)
        se = d * sigmoid(d.mean(axis=(1, 2), keepdims=True))
        u = ref_resize_bilinear(se + hs + d, (9, 9), half_pixel=True)
        u = ref_resize_bilinear(u, (6, 6), align_corners=True)
        return sigmoid(ref_conv_transpose(u, v["tw"], (12, 12), (2, 2), "SAME"))
    return model, g.shard(), ref, [2, 12, 12, 3]


def exported_like(rng):
    """The shape of an ONNX → TF export (NanoDet's): an NCHW input, a
    transpose around every convolution, explicit Pad/PadV2 (−inf before a
    max-pool), LeakyRelu, channel concat, a head split in two outputs,
    reshapes whose shapes are computed by constant ops (SparseToDense,
    Add)."""
    g = Graph(rng)
    x = g.placeholder("input_1", [1, 3, 8, 8])
    g.const("pads", np.array([[0, 0], [0, 0], [1, 1], [1, 1]]))
    g.op("pad", "Pad", [x, "pads"])
    g.const("to_nhwc", np.array([0, 2, 3, 1]))
    g.const("to_nchw", np.array([0, 3, 1, 2]))
    g.op("t1", "Transpose", ["pad", "to_nhwc"])
    g.rand("w1", [3, 3, 3, 6], "float16")
    g.op("conv", "Conv2D", ["t1", "w1"], **{k: v for k, v in conv_attrs((1, 1), "VALID").items() if k not in ("fused_ops", "num_args")})
    g.rand("b1", [6])
    g.op("convb", "Add", ["conv", "b1"])
    g.op("t2", "Transpose", ["convb", "to_nchw"])
    g.op("lrelu", "LeakyRelu", ["t2"], alpha={"f": 0.1})
    g.const("ninf", np.float32(-np.inf))
    g.op("padm", "PadV2", ["lrelu", "pads", "ninf"])
    g.op("t3", "Transpose", ["padm", "to_nhwc"])
    g.op("pool", "MaxPool", ["t3"], ksize=ints(1, 3, 3, 1), strides=ints(1, 2, 2, 1), padding={"s": B64("VALID")}, data_format={"s": B64("NHWC")})
    g.op("t4", "Transpose", ["pool", "to_nchw"])  # [1, 6, 4, 4]
    g.const("axis1", np.array(1))
    g.op("cat", "ConcatV2", ["t4", "lrelu_small", "axis1"], N={"i": "2"})
    g.op("lrelu_small", "Transpose", ["pool_b", "to_nchw"])
    g.op("pool_b", "AvgPool", ["t3"], ksize=ints(1, 3, 3, 1), strides=ints(1, 2, 2, 1), padding={"s": B64("VALID")}, data_format={"s": B64("NHWC")})
    g.const("sizes", np.array([5, 7]))
    g.op("split", "SplitV", ["cat", "sizes", "axis1"], num_split={"i": "2"})
    g.op("cls", "Sigmoid", ["split"])
    g.const("where", np.zeros((0, 1), np.int64).astype(np.int32))
    g.const("three", np.array([3]))
    g.const("none", np.zeros((0,), np.int32))
    g.const("zero", np.array(0))
    g.op("zeros", "SparseToDense", ["where", "three", "none", "zero"])
    g.const("shape5", np.array([1, 5, -1]))
    g.op("shape5b", "AddV2", ["shape5", "zeros"])
    g.op("cls_r", "Reshape", ["cls", "shape5b"])
    g.const("perm3", np.array([0, 2, 1]))
    g.op("out", "Transpose", ["cls_r", "perm3"])  # [1, 16, 5]
    g.const("shape7", np.array([1, 7, 16]))
    g.op("box_r", "Reshape", ["split:1", "shape7"])
    g.op("box", "Transpose", ["box_r", "perm3"])  # [1, 16, 7]
    g.const("axis2", np.array(2))
    g.op("both", "ConcatV2", ["out", "box", "axis2"], N={"i": "2"})  # one output for the test
    model = g.model(["both"])

    def ref(xin):
        v = g.vals
        t = np.pad(xin, [(0, 0), (0, 0), (1, 1), (1, 1)]).transpose(0, 2, 3, 1)
        t = ref_conv(t, v["w1"], 0, (1, 1), "VALID") + v["b1"]
        t = t.transpose(0, 3, 1, 2)
        t = np.where(t > 0, t, 0.1 * t)
        t = np.pad(t, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf).transpose(0, 2, 3, 1)
        win = np.lib.stride_tricks.sliding_window_view(t, (3, 3), axis=(1, 2))[:, ::2, ::2]  # [1, 4, 4, 6, 3, 3]
        mx = win.max(axis=(4, 5)).transpose(0, 3, 1, 2)
        av = win.mean(axis=(4, 5)).transpose(0, 3, 1, 2)
        cat = np.concatenate([mx, av], axis=1)
        cls = sigmoid(cat[:, :5]).reshape(1, 5, -1).transpose(0, 2, 1)
        box = cat[:, 5:].reshape(1, 7, 16).transpose(0, 2, 1)
        return np.concatenate([cls, box], axis=2)
    return model, g.shard(), ref, [1, 3, 8, 8]


def mobilenetv3_like(rng):
    """CenterNet's MobileNetV3 squeeze-excite: a spatial Mean kept as
    [N, 1, 1, C] gating the channels, then a Mean over height alone
    (dropping it) as the output."""
    g = Graph(rng)
    x = g.placeholder("images", [-1, 6, 5, 3])
    g.rand("c_w", [3, 3, 3, 4], "float16")
    g.rand("c_b", [4])
    g.op("c", "_FusedConv2D", [x, "c_w", "c_b"], **conv_attrs((1, 1), "SAME", ("BiasAdd", "Relu6")))
    g.const("hw", np.array([1, 2]))
    g.op("se_m", "Mean", ["c", "hw"], keep_dims={"b": True})
    g.rand("se_w", [1, 1, 4, 4])
    g.rand("se_b", [4])
    g.op("se_c", "_FusedConv2D", ["se_m", "se_w", "se_b"], **conv_attrs((1, 1), "VALID", ("BiasAdd",)))
    g.op("se_s", "Sigmoid", ["se_c"])
    g.op("se", "Mul", ["c", "se_s"])
    g.const("h", np.array([-3]))
    g.op("rows", "Mean", ["se", "h"], keep_dims={"b": False})  # axis −3 is height: [N, 5, 4]
    model = g.model(["rows"])

    def ref(xin):
        v = g.vals
        c = relu6(ref_conv(xin, v["c_w"], v["c_b"], (1, 1), "SAME"))
        gate = sigmoid(ref_conv(c.mean(axis=(1, 2), keepdims=True), v["se_w"], v["se_b"], (1, 1), "VALID"))
        return (c * gate).mean(axis=1)
    return model, g.shard(), ref, [2, 6, 5, 3]


CASES = {"mobilenet_like": mobilenet_like, "conv_map": conv_map, "segmenter_like": segmenter_like, "exported_like": exported_like,
         "mobilenetv3_like": mobilenetv3_like}


def write(outdir):
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(20)
    index = []
    for name, build in CASES.items():
        model, shard, ref, in_shape = build(rng)
        src = os.path.join(outdir, name)
        os.makedirs(src, exist_ok=True)
        # One case as plain JSON + .bin, the other wrapped in JS like nsfwjs.
        if name == "mobilenet_like":
            with open(os.path.join(src, "model.min.js"), "w") as f:
                f.write('!function(t){module.exports=t()}(function(){return{1:[function(t,e,a){e.exports=%s},{}]}});' % json.dumps(model))
            with open(os.path.join(src, "group1-shard1of1.min.js"), "w") as f:
                f.write('!function(i){module.exports=i()}(function(){return{1:[function(i,m,h){m.exports="%s"},{}]}});' % base64.b64encode(shard).decode())
            mpath = os.path.join(src, "model.min.js")
        else:
            with open(os.path.join(src, "model.json"), "w") as f:
                json.dump(model, f)
            with open(os.path.join(src, "group1-shard1of1"), "wb") as f:
                f.write(shard)
            mpath = os.path.join(src, "model.json")
        xin = rng.uniform(0, 1, in_shape).astype(np.float32)
        want = ref(xin.astype(np.float64)).astype(np.float32)
        # A graph whose own input is NCHW has only the one layout.
        for layout in ("tf",) if name == "exported_like" else ("nhwc", "nchw"):
            case = "%s_%s" % (name, layout)
            m = tfjs2onnx.convert(mpath, nchw_input=layout == "nchw", dynamic_batch=name != "exported_like")
            with open(os.path.join(outdir, case + ".onnx"), "wb") as f:
                f.write(m.SerializeToString())
            feed = xin.transpose(0, 3, 1, 2) if layout == "nchw" else xin
            feed.astype("<f4").tofile(os.path.join(outdir, case + ".in.f32"))
            want.astype("<f4").tofile(os.path.join(outdir, case + ".want.f32"))
            index.append({"name": case, "input": m.graph.input[0].name, "output": m.graph.output[0].name,
                          "in_shape": list(feed.shape), "want_shape": list(want.shape)})
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(index, f, indent=1)


if __name__ == "__main__":
    write(sys.argv[1])
