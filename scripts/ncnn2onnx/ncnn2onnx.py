#!/usr/bin/python3
"""ncnn2onnx: converts an ncnn model (.param text + .bin weights) into an
ONNX model, offline, with nothing but python3-onnx and python3-numpy.

It supports exactly the layers of the two Real-ESRGAN models of
waifu2x@1.6.5 — the compact realesr-animevideov3 (SRVGGNetCompact) and the
RRDB network realesrgan-x4plus-anime: Input, Split, Convolution (with
bias, any kernel, stride and padding, no dilation or groups; no fused
activation or a fused leaky ReLU), PReLU, PixelShuffle, Interp (nearest,
integer scale), BinaryOp (add), Eltwise (a weighted sum) and Concat (along
channels) — and stops with a clear message naming the layer on anything
else.

Weights: a Convolution's weight blob starts with a 4-byte tag (0 float32,
0x01306B47 float16; anything else, e.g. int8 quantization, is refused)
and is padded to 4 bytes; its bias and a PReLU's slopes are raw float32.
The ONNX graph takes [N, 3, H, W] of any size and batch.

Usage: ncnn2onnx.py MODEL.param MODEL.bin OUT.onnx [--opset 13]
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ConversionError(Exception):
    """A model this converter will not translate, with the reason."""


MAGIC = 7767517
TAG_F32, TAG_F16 = 0, 0x01306B47
ARRAY_KEY = -23300


def number(v):
    return float(v) if any(ch in v for ch in ".eE") else int(v)


def parse_param(text):
    """The layers of a .param file: (type, name, inputs, outputs, {id: value})."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    if not lines or lines[0] != str(MAGIC):
        raise ConversionError("not an ncnn .param file (want magic %d on the first line)" % MAGIC)
    n_layers, _ = (int(v) for v in lines[1].split())
    layers = []
    for line in lines[2:2 + n_layers]:
        f = line.split()
        kind, name, n_in, n_out = f[0], f[1], int(f[2]), int(f[3])
        ins, outs = f[4:4 + n_in], f[4 + n_in:4 + n_in + n_out]
        params = {}
        for kv in f[4 + n_in + n_out:]:
            k, _, v = kv.partition("=")
            if int(k) <= ARRAY_KEY:
                # An array parameter: key -23300-id, value "count,v1,v2,…".
                items = v.split(",")
                if not items[0].isdigit() or int(items[0]) != len(items) - 1:
                    raise ConversionError("layer %s: array parameter %s: the count does not match its values" % (name, kv))
                params[ARRAY_KEY - int(k)] = [number(x) for x in items[1:]]
                continue
            if int(k) < 0:
                raise ConversionError("layer %s: parameter %s is not supported" % (name, kv))
            params[int(k)] = number(v)
        layers.append((kind, name, ins, outs, params))
    if len(layers) != n_layers:
        raise ConversionError("the .param file declares %d layers, has %d" % (n_layers, len(layers)))
    return layers


class Weights:
    def __init__(self, data):
        self.data, self.off = data, 0

    def raw(self, count, name):
        n = 4 * count
        if self.off + n > len(self.data):
            raise ConversionError("layer %s: the .bin file ends inside its weights" % name)
        out = np.frombuffer(self.data, "<f4", count, self.off).astype(np.float32)
        self.off += n
        return out

    def tagged(self, count, name):
        if self.off + 4 > len(self.data):
            raise ConversionError("layer %s: the .bin file ends before its weights" % name)
        tag = int.from_bytes(self.data[self.off:self.off + 4], "little")
        self.off += 4
        if tag == TAG_F32:
            return self.raw(count, name)
        if tag != TAG_F16:
            raise ConversionError("layer %s: weight storage tag %#x is not supported (float32 or float16 only)" % (name, tag))
        n = 2 * count
        if self.off + n > len(self.data):
            raise ConversionError("layer %s: the .bin file ends inside its weights" % name)
        out = np.frombuffer(self.data, "<f2", count, self.off).astype(np.float32)
        self.off += (n + 3) // 4 * 4
        return out


SUPPORTED = ("Input", "Split", "Convolution", "PReLU", "PixelShuffle", "Interp", "BinaryOp", "Eltwise", "Concat")


def convert(param_text, bin_data, opset=13):
    layers = parse_param(param_text)
    w = Weights(bin_data)
    nodes, inits, inputs, blobs = [], [], [], {}
    produced = []

    def init(arr, name):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def known(name, blob):
        if blob not in blobs:
            raise ConversionError("layer %s reads blob %s that no layer wrote" % (name, blob))
        return blobs[blob]

    def allow(name, params, ok):
        extra = sorted(set(params) - set(ok))
        if extra:
            raise ConversionError("layer %s: parameters %s are not supported" % (name, ", ".join("%d=%s" % (k, params[k]) for k in extra)))

    for kind, name, ins, outs, p in layers:
        if kind not in SUPPORTED:
            raise ConversionError("layer %s: type %s is not supported (supported: %s)" % (name, kind, ", ".join(SUPPORTED)))
        oname = "l_" + name
        if kind == "Input":
            inputs.append(helper.make_tensor_value_info(outs[0], TensorProto.FLOAT, ["N", 3, "H", "W"]))
            blobs[outs[0]] = outs[0]
            continue
        if kind == "Split":
            for o in outs:
                blobs[o] = known(name, ins[0])
            continue
        x = [known(name, i) for i in ins]
        if kind == "Convolution":
            allow(name, p, (0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14))
            act, act_args = p.get(9, 0), p.get(10, [])
            if act not in (0, 2) or (act == 2 and len(act_args) != 1) or (act == 0 and act_args):
                raise ConversionError("layer %s: fused activation %s %s is not supported (none, or leaky ReLU 9=2 with its slope)" % (name, act, act_args))
            cout, k = p[0], p[1]
            kw, kh = k, p.get(11, k)
            dil, stride, pad = p.get(2, 1), p.get(3, 1), p.get(4, 0)
            if dil != 1 or p.get(12, 1) != 1 or pad < 0 or p.get(14, pad) != pad:
                raise ConversionError("layer %s: dilation, asymmetric or automatic padding is not supported" % name)
            cin = p[6] // (cout * kw * kh)
            if cin * cout * kw * kh != p[6]:
                raise ConversionError("layer %s: weight size %d is not a multiple of %d×%d×%d" % (name, p[6], cout, kh, kw))
            weight = w.tagged(p[6], name).reshape(cout, cin, kh, kw)  # ncnn stores OIHW
            args = [x[0], init(weight, oname + "_w")]
            if p.get(5, 0):
                args.append(init(w.raw(cout, name), oname + "_b"))
            conv = oname + "_conv" if act else oname
            nodes.append(helper.make_node("Conv", args, [conv], name=conv, kernel_shape=[kh, kw],
                                          strides=[p.get(13, stride), stride], pads=[pad, pad, pad, pad]))
            if act == 2:
                nodes.append(helper.make_node("LeakyRelu", [conv], [oname], name=oname, alpha=float(act_args[0])))
        elif kind == "PReLU":
            allow(name, p, (0,))
            slope = w.raw(p.get(0, 1), name).reshape(-1, 1, 1)
            nodes.append(helper.make_node("PRelu", [x[0], init(slope, oname + "_slope")], [oname], name=oname))
        elif kind == "PixelShuffle":
            allow(name, p, (0, 1))
            if p.get(1, 0) != 0:
                raise ConversionError("layer %s: PixelShuffle mode %s is not supported (0 only)" % (name, p[1]))
            nodes.append(helper.make_node("DepthToSpace", [x[0]], [oname], name=oname, blocksize=p[0], mode="CRD"))
        elif kind == "Interp":
            allow(name, p, (0, 1, 2))
            hs, ws = float(p.get(1, 1.0)), float(p.get(2, 1.0))
            if p.get(0) != 1 or hs != int(hs) or ws != int(ws):
                raise ConversionError("layer %s: only nearest interpolation by an integer scale is supported" % name)
            scales = init(np.array([1, 1, hs, ws], np.float32), oname + "_scales")
            nodes.append(helper.make_node("Resize", [x[0], "", scales], [oname], name=oname, mode="nearest",
                                          coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
        elif kind == "BinaryOp":
            allow(name, p, (0,))
            if p.get(0, 0) != 0 or len(x) != 2:
                raise ConversionError("layer %s: only the add of two blobs is supported" % name)
            nodes.append(helper.make_node("Add", x, [oname], name=oname))
        elif kind == "Eltwise":
            allow(name, p, (0, 1))
            coeffs = p.get(1, [1.0] * len(x))
            if p.get(0, 1) != 1 or len(x) < 2 or len(coeffs) != len(x):
                raise ConversionError("layer %s: only the weighted sum (0=1) of two or more blobs, one coefficient each, is supported" % name)
            terms = []
            for i, (blob, c) in enumerate(zip(x, coeffs)):
                if c == 1:
                    terms.append(blob)
                    continue
                t = "%s_t%d" % (oname, i)
                nodes.append(helper.make_node("Mul", [blob, init(np.array(c, np.float32), t + "_c")], [t], name=t))
                terms.append(t)
            nodes.append(helper.make_node("Sum", terms, [oname], name=oname))
        elif kind == "Concat":
            allow(name, p, (0,))
            if p.get(0, 0) != 0:
                raise ConversionError("layer %s: only the concatenation along channels (0=0) is supported" % name)
            nodes.append(helper.make_node("Concat", x, [oname], name=oname, axis=1))
        blobs[outs[0]] = oname
        produced.append(outs[0])
    if w.off != len(bin_data):
        raise ConversionError("the .bin file has %d bytes left over after the last layer" % (len(bin_data) - w.off))
    consumed = {i for _, _, ins, _, _ in layers for i in ins}
    finals = [b for b in produced if b not in consumed]
    if len(finals) != 1:
        raise ConversionError("want one output blob, found %s" % finals)
    nodes.append(helper.make_node("Identity", [blobs[finals[0]]], [finals[0]], name=finals[0] + "__out"))
    graph = helper.make_graph(nodes, "ncnn2onnx", inputs,
                              [helper.make_tensor_value_info(finals[0], TensorProto.FLOAT, ["N", 3, None, None])], inits)
    m = helper.make_model(graph, producer_name="frontdoor-ncnn2onnx", producer_version="1",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("param")
    ap.add_argument("bin")
    ap.add_argument("out")
    ap.add_argument("--opset", type=int, default=13)
    a = ap.parse_args(argv)
    try:
        with open(a.param) as f, open(a.bin, "rb") as g:
            m = convert(f.read(), g.read(), a.opset)
    except ConversionError as e:
        print("ncnn2onnx: %s" % e, file=sys.stderr)
        return 2
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(m.SerializeToString())
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
