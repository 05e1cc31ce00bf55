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
        """quant: None (float32), "uint8" or "float16"."""
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


CASES = {"mobilenet_like": mobilenet_like, "conv_map": conv_map}


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
        for layout in ("nhwc", "nchw"):
            case = "%s_%s" % (name, layout)
            m = tfjs2onnx.convert(mpath, nchw_input=layout == "nchw")
            with open(os.path.join(outdir, case + ".onnx"), "wb") as f:
                f.write(m.SerializeToString())
            feed = xin if layout == "nhwc" else xin.transpose(0, 3, 1, 2)
            feed.astype("<f4").tofile(os.path.join(outdir, case + ".in.f32"))
            want.astype("<f4").tofile(os.path.join(outdir, case + ".want.f32"))
            index.append({"name": case, "input": m.graph.input[0].name, "output": m.graph.output[0].name,
                          "in_shape": list(feed.shape), "want_shape": list(want.shape)})
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(index, f, indent=1)


if __name__ == "__main__":
    write(sys.argv[1])
