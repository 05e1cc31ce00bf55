#!/usr/bin/python3
"""A direct numpy evaluation of a TF.js graph model, op by op from
TensorFlow's definitions (NHWC throughout, TF's SAME padding), sharing no
code with the converter's ONNX mapping. The tests compare a converted
graph's ONNX Runtime output against it.

  reference.py MODEL_JSON IN.f32 D0 D1 D2 D3 OUT.f32 [--weights SHARD ...]
               [--output NODE]

IN.f32 holds the graph input in TF's own axis order (D0..D3); OUT.f32 gets
the first output (of the signature's, or NODE).
"""
import argparse
import sys

import numpy as np

import cases
import tfjs2onnx


def _relu6(x):
    return np.clip(x, 0, 6)


def _act(node, x):
    for f in tfjs2onnx._attr(node, "fused_ops", [])[1:]:
        x = {"Relu": lambda v: np.maximum(v, 0), "Relu6": _relu6}[f](x)
    return x


def evaluate(model, weights, feed, outputs=None):
    topo = model.get("modelTopology", model)
    nodes = {n["name"]: n for n in topo["node"]}
    vals = {}

    def val(ref):
        name, _, idx = ref.partition(":")
        if name not in vals:
            vals[name] = run(nodes[name])
        v = vals[name]
        return v[int(idx or 0)] if isinstance(v, list) else v

    def run(n):
        op, a = n["op"], tfjs2onnx._attr
        ins = [val(i) for i in n.get("input", []) if not i.startswith("^")]
        if op == "Placeholder":
            return feed
        if op == "Const":
            return weights[n["name"]].astype(np.float64)
        if op == "Identity":
            return ins[0]
        if op in ("AddV2", "Add"):
            return ins[0] + ins[1]
        if op == "Sub":
            return ins[0] - ins[1]
        if op == "Mul":
            return ins[0] * ins[1]
        if op in ("_FusedConv2D", "FusedDepthwiseConv2dNative", "Conv2D", "DepthwiseConv2dNative"):
            st, dl = a(n, "strides")[1:3], a(n, "dilations", [1, 1, 1, 1])[1:3]
            fused = op.startswith("_") or op.startswith("Fused")
            y = cases.ref_conv(ins[0], ins[1], ins[2] if fused else 0, st, a(n, "padding"), dl,
                               depthwise="Depthwise" in op)
            return _act(n, y) if fused else y
        if op == "Conv2DBackpropInput":
            return cases.ref_conv_transpose(ins[2], ins[1], [int(v) for v in ins[0][1:3]], a(n, "strides")[1:3], a(n, "padding"))
        if op == "ResizeBilinear":
            return cases.ref_resize_bilinear(ins[0], [int(v) for v in ins[1]], a(n, "align_corners", False),
                                             a(n, "half_pixel_centers", False))
        if op == "Relu":
            return np.maximum(ins[0], 0)
        if op == "Relu6":
            return _relu6(ins[0])
        if op == "Sigmoid":
            return cases.sigmoid(ins[0])
        if op == "AddN":
            return sum(ins)
        if op == "LeakyRelu":
            return np.where(ins[0] > 0, ins[0], ins[0] * a(n, "alpha", 0.2))
        if op == "Transpose":
            return ins[0].transpose([int(v) for v in ins[1]])
        if op in ("Pad", "PadV2"):
            value = float(ins[2]) if len(ins) > 2 else 0.0
            return np.pad(ins[0], [(int(p), int(q)) for p, q in ins[1]], constant_values=value)
        if op == "MaxPool":
            k, s = a(n, "ksize")[1:3], a(n, "strides")[1:3]
            x = ins[0]
            oh, ow = (x.shape[1] - k[0]) // s[0] + 1, (x.shape[2] - k[1]) // s[1] + 1
            out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
            for i in range(oh):
                for j in range(ow):
                    out[:, i, j] = x[:, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].max(axis=(1, 2))
            return out
        if op == "ConcatV2":
            return np.concatenate(ins[:-1], axis=int(ins[-1]))
        if op == "SplitV":
            cuts = np.cumsum([int(v) for v in ins[1]])[:-1]
            return np.split(ins[0], cuts, axis=int(ins[2]))
        if op == "Reshape":
            return ins[0].reshape([int(v) for v in ins[1]])
        if op == "SparseToDense":
            out = np.full([int(d) for d in ins[1]], ins[3])
            idx = np.asarray(ins[0]).astype(int).reshape(-1, out.ndim)
            out[tuple(idx.T)] = ins[2]
            return out
        if op == "_FusedMatMul":
            b = ins[1].T if a(n, "transpose_b", False) else ins[1]
            return _act(n, ins[0] @ b + ins[2])
        if op == "AvgPool":
            k, s = a(n, "ksize")[1:3], a(n, "strides")[1:3]
            x = ins[0]
            oh, ow = (x.shape[1] - k[0]) // s[0] + 1, (x.shape[2] - k[1]) // s[1] + 1
            out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
            for i in range(oh):
                for j in range(ow):
                    out[:, i, j] = x[:, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].mean(axis=(1, 2))
            return out
        if op == "Squeeze":
            return np.squeeze(ins[0], axis=tuple(a(n, "squeeze_dims")))
        if op == "Softmax":
            return cases.softmax(ins[0])
        if op == "Mean":
            return ins[0].mean(axis=tuple(int(d) for d in np.ravel(ins[1])), keepdims=a(n, "keep_dims", False))
        raise tfjs2onnx.ConversionError("reference: op %s not implemented" % op)

    outs = outputs or tfjs2onnx.Converter(model, weights).out_names
    return [val(o) for o in outs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("shape", nargs=4, type=int)
    ap.add_argument("out")
    ap.add_argument("--weights", nargs="+")
    ap.add_argument("--output", help="the node to evaluate (default: the signature's first output)")
    a = ap.parse_args()
    model = tfjs2onnx.read_model_json(a.model)
    paths = a.weights or tfjs2onnx.shard_paths(a.model, model)
    weights = tfjs2onnx.decode_weights(model["weightsManifest"], [tfjs2onnx.read_shard(p) for p in paths])
    x = np.fromfile(a.input, "<f4").reshape(a.shape).astype(np.float64)
    evaluate(model, weights, x, [a.output] if a.output else None)[0].astype("<f4").tofile(a.out)


if __name__ == "__main__":
    sys.exit(main())
