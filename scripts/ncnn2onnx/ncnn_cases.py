#!/usr/bin/python3
"""Test models for ncnn2onnx, each with its conversion and the expected
output computed in numpy from ncnn's layer definitions: a small
SRVGGNetCompact-shaped model (convolutions with float16 and float32
weights, PReLU, PixelShuffle, a nearest up-sampled skip, add) and a small
RRDB-shaped one (convolutions with a fused leaky ReLU, a dense block's
channel concatenations, the residual's weighted Eltwise sum, nearest
up-sampling).

`ncnn_cases.py OUTDIR` writes CASE.onnx, CASE.in.f32, CASE.want.f32 and
OUTDIR/cases.json in the format of scripts/tfjs2onnx/cases.py; the Go test
in mortred/model/ort runs them in ONNX Runtime.
"""
import json
import os
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tfjs2onnx"))
import ncnn2onnx  # noqa: E402
from cases import ref_conv  # noqa: E402  (tfjs2onnx's, NHWC)

TAG_F16 = (0x01306B47).to_bytes(4, "little")
TAG_F32 = (0).to_bytes(4, "little")


def conv_nchw(x, w_oihw, b, pad):
    """ncnn Convolution, stride 1, symmetric padding."""
    xp = np.pad(x.transpose(0, 2, 3, 1), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    return ref_conv(xp, w_oihw.transpose(2, 3, 1, 0), b, (1, 1), "VALID").transpose(0, 3, 1, 2)


def pixel_shuffle(x, r):
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def conv_layer(rng, bins, vals):
    """The conv(name, cin, cout, f16, extra="") of a test model: random 3×3
    weights (stored float16 or float32) and bias, appended to bins; its
    param string."""
    def conv(name, cin, cout, f16, extra=""):
        w = (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        if f16:
            h = w.astype("<f2")
            data = TAG_F16 + h.tobytes()
            data += b"\0" * (-len(data) % 4)
            w = h.astype(np.float32)
        else:
            data = TAG_F32 + w.astype("<f4").tobytes()
        bins.append(data + b.astype("<f4").tobytes())
        vals[name] = (w, b)
        return ("0=%d 1=3 4=1 5=1 6=%d %s" % (cout, w.size, extra)).strip()
    return conv


def param_text(layers, n_blobs):
    text = "7767517\n%d %d\n" % (len(layers), n_blobs)
    for kind, name, ins, outs, p in layers:
        text += "%-12s %-8s %d %d %s %s\n" % (kind, name, len(ins), len(outs), " ".join(ins + outs), p)
    return text


def compact(rng, scale=2, feat=5):
    bins, vals = [], {}
    conv = conv_layer(rng, bins, vals)

    def prelu(name, n):
        s = (rng.uniform(0, 0.5, n)).astype(np.float32)
        bins.append(s.astype("<f4").tobytes())
        vals[name] = s
        return "0=%d" % n

    out_c = 3 * scale * scale
    layers = [
        ("Input", "in", [], ["data"], ""),
        ("Split", "split", ["data"], ["d0", "d1"], ""),
        ("Convolution", "c0", ["d1"], ["a"], conv("c0", 3, feat, True)),
        ("PReLU", "p0", ["a"], ["b"], prelu("p0", feat)),
        ("Convolution", "c1", ["b"], ["c"], conv("c1", feat, feat, False)),
        ("PReLU", "p1", ["c"], ["d"], prelu("p1", feat)),
        ("Convolution", "c2", ["d"], ["e"], conv("c2", feat, out_c, True)),
        ("PixelShuffle", "ps", ["e"], ["f"], "0=%d" % scale),
        ("Interp", "up", ["d0"], ["g"], "0=1 1=%.6e 2=%.6e" % (scale, scale)),
        ("BinaryOp", "add", ["f", "g"], ["output"], ""),
    ]
    text = param_text(layers, 11)

    def ref(x):
        def prl(t, s):
            return np.where(t > 0, t, t * s.reshape(1, -1, 1, 1))
        t = prl(conv_nchw(x, *vals["c0"], 1), vals["p0"])
        t = prl(conv_nchw(t, *vals["c1"], 1), vals["p1"])
        t = pixel_shuffle(conv_nchw(t, *vals["c2"], 1), scale)
        return t + x.repeat(scale, axis=2).repeat(scale, axis=3)
    return text, b"".join(bins), ref, [2, 3, 5, 7]


def rrdb(rng, feat=4, grow=3, slope=0.2, beta=0.2):
    """One dense block of realesrgan-x4plus-anime's shape: conv, a grown
    layer concatenated to its input, the block's residual scaled by beta,
    the trunk's skip, a ×2 nearest up-sampling and a leaky output conv."""
    bins, vals = [], {}
    conv = conv_layer(rng, bins, vals)
    leaky = "9=2 -23310=1,%e" % slope
    layers = [
        ("Input", "in", [], ["data"], ""),
        ("Convolution", "c0", ["data"], ["a"], conv("c0", 3, feat, False)),
        ("Split", "s0", ["a"], ["a0", "a1", "a2", "a3"], ""),
        ("Convolution", "c1", ["a0"], ["b"], conv("c1", feat, grow, True, leaky)),
        ("Concat", "cat", ["a1", "b"], ["c"], "0=0"),
        ("Convolution", "c2", ["c"], ["d"], conv("c2", feat + grow, feat, True)),
        ("Eltwise", "res", ["d", "a2"], ["e"], "0=1 -23301=2,%e,1.000000e+00" % beta),
        ("BinaryOp", "skip", ["a3", "e"], ["f"], ""),
        ("Interp", "up", ["f"], ["g"], "0=1 1=2.000000e+00 2=2.000000e+00"),
        ("Convolution", "c3", ["g"], ["output"], conv("c3", feat, 3, False, leaky)),
    ]

    def ref(x):
        def lrelu(t):
            return np.where(t > 0, t, t * slope)
        a = conv_nchw(x, *vals["c0"], 1)
        b = lrelu(conv_nchw(a, *vals["c1"], 1))
        d = conv_nchw(np.concatenate([a, b], axis=1), *vals["c2"], 1)
        f = a + (beta * d + a)
        return lrelu(conv_nchw(f.repeat(2, axis=2).repeat(2, axis=3), *vals["c3"], 1))
    return param_text(layers, 13), b"".join(bins), ref, [2, 3, 6, 5]


def write(outdir):
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(21)
    index = []
    for name, build in {"compact_x2": compact, "rrdb_block": rrdb}.items():
        text, data, ref, shape = build(rng)
        m = ncnn2onnx.convert(text, data)
        with open(os.path.join(outdir, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
        x = rng.uniform(0, 1, shape).astype(np.float32)
        x.astype("<f4").tofile(os.path.join(outdir, name + ".in.f32"))
        want = ref(x.astype(np.float64)).astype(np.float32)
        want.astype("<f4").tofile(os.path.join(outdir, name + ".want.f32"))
        index.append({"name": name, "input": m.graph.input[0].name, "output": m.graph.output[0].name,
                      "in_shape": shape, "want_shape": list(want.shape)})
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump(index, f, indent=1)


if __name__ == "__main__":
    write(sys.argv[1])
