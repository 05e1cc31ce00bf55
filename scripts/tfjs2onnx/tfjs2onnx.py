#!/usr/bin/python3
"""tfjs2onnx: converts a TensorFlow.js graph model (model.json + weight
shards) into an ONNX model, offline, with nothing but python3-onnx and
python3-numpy.

It supports exactly the ops of the graphs mortred serves (see OPS below) and
stops with a clear message naming the node on anything else: an unknown op,
or a known op with an attribute value it does not translate (NCHW data,
explicit padding, an unknown fused activation, ...).

Inputs may be plain files (model.json, *.bin) or the JavaScript modules some
npm packages wrap them in (nsfwjs ships model.min.js exporting the model.json
object literal and group1-shard*.min.js exporting the shard as a base64
string): the wrapper is parsed, never executed.

Layout: TF.js graphs are NHWC; ONNX convolutions are NCHW. A 4-D activation
is kept in NCHW inside the ONNX graph and turned back to NHWC only where an
op needs TF's axis order (and at the outputs), so a chain of convolutions has
no transposes. With --nchw-input the graph input itself is NCHW (what
mortred's image models pack), else it is NHWC as in TF.js.

Usage:
  tfjs2onnx.py MODEL_JSON OUT.onnx [--weights SHARD ...] [--nchw-input]
               [--output NAME ...] [--opset 13]
"""
import argparse
import base64
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ConversionError(Exception):
    """A graph this converter will not translate, with the reason."""


# ---------------------------------------------------------------- JS wrapper

_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class _JSLiteral:
    """Parses one JavaScript object/array/string/number literal (the subset a
    minifier emits for JSON data: unquoted keys, .5, !0/!1) without running
    any code."""

    def __init__(self, text, pos):
        self.s, self.i = text, pos

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self):
        self.ws()
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c in "\"'":
            return self.string()
        if self.s.startswith("!0", self.i):
            self.i += 2
            return True
        if self.s.startswith("!1", self.i):
            self.i += 2
            return False
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return val
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            t = m.group()
            return float(t) if any(ch in t for ch in ".eE") else int(t)
        raise ConversionError("JS wrapper: unexpected %r at offset %d" % (self.s[self.i:self.i + 20], self.i))

    def string(self):
        q = self.s[self.i]
        out, self.i = [], self.i + 1
        while True:
            c = self.s[self.i]
            if c == q:
                self.i += 1
                return "".join(out)
            if c == "\\":
                out.append(json.loads('"' + self.s[self.i:self.i + (6 if self.s[self.i + 1] == "u" else 2)] + '"'))
                self.i += 6 if self.s[self.i + 1] == "u" else 2
                continue
            out.append(c)
            self.i += 1

    def obj(self):
        self.i += 1
        out = {}
        while True:
            self.ws()
            if self.s[self.i] == "}":
                self.i += 1
                return out
            if self.s[self.i] in "\"'":
                key = self.string()
            else:
                m = _IDENT.match(self.s, self.i) or _NUMBER.match(self.s, self.i)
                if not m:
                    raise ConversionError("JS wrapper: bad key at offset %d" % self.i)
                key, self.i = m.group(), m.end()
            self.ws()
            self.expect(":")
            out[key] = self.value()
            self.ws()
            if self.s[self.i] == ",":
                self.i += 1

    def arr(self):
        self.i += 1
        out = []
        while True:
            self.ws()
            if self.s[self.i] == "]":
                self.i += 1
                return out
            out.append(self.value())
            self.ws()
            if self.s[self.i] == ",":
                self.i += 1

    def expect(self, c):
        if self.s[self.i] != c:
            raise ConversionError("JS wrapper: want %r at offset %d" % (c, self.i))
        self.i += 1


def _exported(text, path):
    """The literal a browserify-style module assigns to X.exports."""
    m = re.search(r"\b[A-Za-z_$][\w$]*\.exports\s*=\s*(?=[{\[\"'])", text)
    if not m:
        raise ConversionError("%s: no `exports = <literal>` found in the JS wrapper" % path)
    return _JSLiteral(text, m.end()).value()


def read_model_json(path):
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".json"):
        return json.loads(raw)
    return _exported(raw.decode("utf-8"), path)


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".js"):
        data = _exported(raw.decode("utf-8"), path)
        if not isinstance(data, str):
            raise ConversionError("%s: the JS wrapper exports a %s, want a base64 string" % (path, type(data).__name__))
        return base64.b64decode(data)
    return raw


# ------------------------------------------------------------------- weights

_DTYPES = {"float32": np.float32, "int32": np.int32, "bool": np.bool_}
_QDTYPES = {"uint8": np.uint8, "uint16": np.uint16, "float16": np.float16}


def decode_weights(manifest, shards):
    """Returns {name: ndarray} from the weightsManifest and the shard bytes of
    every group, in manifest order."""
    out = {}
    groups = list(manifest)
    if len(shards) != sum(len(g["paths"]) for g in groups):
        raise ConversionError("the manifest names %d shard files, got %d" % (sum(len(g["paths"]) for g in groups), len(shards)))
    k = 0
    for g in groups:
        buf = b"".join(shards[k:k + len(g["paths"])])
        k += len(g["paths"])
        off = 0
        for w in g["weights"]:
            shape = [int(d) for d in w["shape"]]
            count = int(np.prod(shape)) if shape else 1
            dtype = w["dtype"]
            if dtype not in _DTYPES:
                raise ConversionError("weight %s: dtype %r is not supported (supported: %s)" % (w["name"], dtype, ", ".join(_DTYPES)))
            q = w.get("quantization")
            if q:
                qd = q["dtype"]
                if qd not in _QDTYPES:
                    raise ConversionError("weight %s: quantization dtype %r is not supported" % (w["name"], qd))
                store = np.dtype(_QDTYPES[qd]).newbyteorder("<")
                n = count * store.itemsize
                vals = np.frombuffer(buf, store, count, off)
                if qd == "float16":
                    arr = vals.astype(np.float32)
                else:
                    arr = (vals.astype(np.float32) * np.float32(q["scale"]) + np.float32(q["min"]))
                    if dtype == "int32":
                        arr = np.round(arr).astype(np.int32)
            else:
                store = np.dtype(_DTYPES[dtype]).newbyteorder("<")
                n = count * store.itemsize
                arr = np.frombuffer(buf, store, count, off).astype(_DTYPES[dtype])
            if off + n > len(buf):
                raise ConversionError("weight %s runs past the end of its shards" % w["name"])
            out[w["name"]] = np.ascontiguousarray(arr.reshape(shape))
            off += n
        if off != len(buf):
            raise ConversionError("shard group %s: %d bytes left over after the last weight" % (g["paths"], len(buf) - off))
    return out


# --------------------------------------------------------------------- graph

def _attr(node, key, default=None):
    a = node.get("attr", {}).get(key)
    if a is None:
        return default
    if "list" in a:
        lst = a["list"]
        if "i" in lst:
            return [int(v) for v in lst["i"]]
        if "s" in lst:
            return [base64.b64decode(v).decode() for v in lst["s"]]
        if "f" in lst:
            return [float(v) for v in lst["f"]]
        return []
    if "s" in a:
        return base64.b64decode(a["s"]).decode()
    if "i" in a:
        return int(a["i"])
    if "f" in a:
        return float(a["f"])
    if "b" in a:
        return bool(a["b"])
    if "type" in a:
        return a["type"]
    if "shape" in a:
        return a["shape"]
    return default


class _T:
    """A TF tensor as it exists in the ONNX graph: its ONNX name, its TF rank
    and whether a 4-D value is held in NCHW order (nchw) or TF's own."""

    def __init__(self, name, rank, nchw=False, const=None):
        self.name, self.rank, self.nchw, self.const = name, rank, nchw, const
        self.nchw_name = None  # a plain 4-D value's NCHW copy, once made


NHWC_TO_NCHW = [0, 3, 1, 2]
NCHW_TO_NHWC = [0, 2, 3, 1]


class Converter:
    def __init__(self, model, weights, nchw_input=False, outputs=None, opset=13, dynamic_batch=False):
        topo = model.get("modelTopology", model)
        self.nodes = {n["name"]: n for n in topo["node"]}
        self.order = [n["name"] for n in topo["node"]]
        self.weights = weights
        self.nchw_input = nchw_input
        self.dynamic_batch = dynamic_batch
        self.opset = opset
        self.out_names = outputs or self._default_outputs(model)
        self.onnx_nodes, self.inits, self.inputs = [], [], []
        self.vals = {}
        self.uid = 0

    def _default_outputs(self, model):
        sig = model.get("signature") or model.get("userDefinedMetadata", {}).get("signature")
        if sig and sig.get("outputs"):
            return [k.split(":")[0] for k in sig["outputs"]]
        used = {i.lstrip("^").split(":")[0] for n in self.nodes.values() for i in n.get("input", [])}
        return [n for n in self.order if n not in used and self.nodes[n]["op"] != "Const"]

    # -- emit helpers
    def fresh(self, hint):
        self.uid += 1
        return "%s__%d" % (hint, self.uid)

    def emit(self, op, inputs, hint, **attrs):
        out = self.fresh(hint)
        self.onnx_nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def init(self, arr, hint):
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def plain(self, t):
        """t in TF's own axis order."""
        if not t.nchw:
            return t.name
        return self.emit("Transpose", [t.name], "to_nhwc", perm=NCHW_TO_NHWC)

    def image(self, t, node):
        """A 4-D NHWC value in NCHW order, for the ops that need it."""
        if t.const is not None or t.rank != 4:
            raise ConversionError("node %s: input is not a 4-D image tensor" % node["name"])
        if t.nchw:
            return t.name
        if t.nchw_name is None:
            t.nchw_name = self.emit("Transpose", [t.name], "to_nchw", perm=NHWC_TO_NCHW)
        return t.nchw_name

    # -- graph walk
    def value(self, ref):
        name, _, idx = ref.lstrip("^").partition(":")
        if name not in self.vals:
            self.vals[name] = self.convert(name)
        v = self.vals[name]
        if isinstance(v, list):  # a multi-output op
            return v[int(idx or 0)]
        if idx not in ("", "0"):
            raise ConversionError("node %s has one output; %s refers to output %s" % (name, ref, idx))
        return v

    def convert(self, name):
        node = self.nodes.get(name)
        if node is None:
            raise ConversionError("the graph refers to a node %r it does not define" % name)
        op = node["op"]
        fn = OPS.get(op)
        if fn is None:
            raise ConversionError("node %s: op %s is not supported (supported: %s)" % (name, op, ", ".join(sorted(OPS))))
        ins = [self.value(i) for i in node.get("input", []) if not i.startswith("^")]
        if op in FOLD and ins and all(t.const is not None for t in ins):
            # Shape arithmetic a converter left in the graph: computed here.
            arr = np.asarray(FOLD[op](node, *[t.const for t in ins]))
            return _T(None, arr.ndim, const=arr)
        return fn(self, node, ins)

    def run(self):
        outs = []
        for o in self.out_names:
            t = self.value(o)
            if t.const is not None:
                raise ConversionError("output %s is a constant" % o)
            name = self.plain(t)
            final = o.replace("/", "_")
            self.onnx_nodes.append(helper.make_node("Identity", [name], [final], name=final + "__out"))
            outs.append(helper.make_tensor_value_info(final, TensorProto.FLOAT, [None] * t.rank))
        graph = helper.make_graph(self.onnx_nodes, "tfjs2onnx", self.inputs, outs, self.inits)
        m = helper.make_model(graph, producer_name="frontdoor-tfjs2onnx", producer_version="1",
                              opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


# ----------------------------------------------------------------------- ops

def _placeholder(c, node, ins):
    dims = node.get("attr", {}).get("shape", {}).get("shape", {}).get("dim", [])
    shape = [int(d.get("size", -1)) for d in dims]
    dtype = _attr(node, "dtype", "DT_FLOAT")
    if dtype != "DT_FLOAT":
        raise ConversionError("input %s: dtype %s is not supported (float32 only)" % (node["name"], dtype))
    name = node["name"].replace("/", "_")
    onnx_shape = [d if d > 0 else "N" for d in shape]
    if c.dynamic_batch and shape:
        onnx_shape[0] = "N"
    if len(shape) == 4 and c.nchw_input:
        onnx_shape = [onnx_shape[i] for i in NHWC_TO_NCHW]
        c.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, onnx_shape))
        return _T(name, 4, nchw=True)
    c.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, onnx_shape))
    return _T(name, len(shape))


def _const(c, node, ins):
    if node["name"] not in c.weights:
        raise ConversionError("const %s has no weight in the manifest" % node["name"])
    arr = c.weights[node["name"]]
    return _T(None, arr.ndim, const=arr)


def _identity(c, node, ins):
    return ins[0]


def _materialise(c, t, like_nchw, hint):
    """A const operand of a binary op, broadcastable against a 4-D NCHW value
    when like_nchw."""
    arr = t.const.astype(np.float32) if t.const.dtype != np.int32 else t.const
    if like_nchw:
        if arr.ndim == 4:
            arr = arr.transpose(NHWC_TO_NCHW)
        elif arr.ndim == 1 and arr.size > 1:
            arr = arr.reshape(-1, 1, 1)
        elif arr.ndim > 1:
            raise ConversionError("const of shape %s against a 4-D value is not supported" % (arr.shape,))
    return c.init(arr, hint)


def _binary(onnx_op):
    def fn(c, node, ins):
        a, b = ins
        if a.const is not None and b.const is not None:
            raise ConversionError("node %s: both operands are constants (fold them in the source graph)" % node["name"])
        nchw = (a.nchw or b.nchw) and all(t.nchw or t.const is not None for t in (a, b))
        names = []
        for t in (a, b):
            if t.const is not None:
                names.append(_materialise(c, t, nchw, node["name"].replace("/", "_")))
            elif nchw:
                names.append(t.name)
            else:
                names.append(c.plain(t))
        return _T(c.emit(onnx_op, names, onnx_op), max(a.rank, b.rank), nchw=nchw)
    return fn


def _check_nhwc(node):
    fmt = _attr(node, "data_format", "NHWC")
    if fmt != "NHWC":
        raise ConversionError("node %s: data_format %s is not supported (NHWC only)" % (node["name"], fmt))


def _spatial(node, key):
    v = _attr(node, key, [1, 1, 1, 1])
    if len(v) != 4 or v[0] != 1 or v[3] != 1:
        raise ConversionError("node %s: %s %s is not supported (want [1, h, w, 1])" % (node["name"], key, v))
    return v[1:3]


def _pad_attrs(node, kernel=None):
    pad = _attr(node, "padding")
    dil = _attr(node, "dilations", [1, 1, 1, 1])
    if pad == "SAME" and dil[1:3] != [1, 1]:
        # ONNX Runtime refuses auto_pad with dilations; at stride 1 TF's SAME
        # padding does not depend on the input size, so it can be explicit.
        if _spatial(node, "strides") != [1, 1]:
            raise ConversionError("node %s: SAME padding with dilations and strides > 1 is not supported" % node["name"])
        tot = [(k - 1) * d for k, d in zip(kernel, dil[1:3])]
        return {"pads": [tot[0] // 2, tot[1] // 2, tot[0] - tot[0] // 2, tot[1] - tot[1] // 2]}
    if pad == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if pad == "VALID":
        return {"auto_pad": "VALID"}
    raise ConversionError("node %s: padding %s is not supported (SAME or VALID)" % (node["name"], pad))


def _activation(c, out, node, fused):
    """Applies the fused ops after BiasAdd."""
    for f in fused:
        if f == "Relu":
            out = c.emit("Relu", [out], "relu")
        elif f == "Relu6":
            out = c.emit("Clip", [out, c.init(np.float32(0), "zero"), c.init(np.float32(6), "six")], "relu6")
        else:
            raise ConversionError("node %s: fused op %s is not supported (BiasAdd, Relu, Relu6)" % (node["name"], f))
    return out


def _fused_list(node):
    fused = _attr(node, "fused_ops", [])
    if not fused or fused[0] != "BiasAdd":
        raise ConversionError("node %s: fused_ops %s is not supported (want BiasAdd first)" % (node["name"], fused))
    return fused[1:]


def _conv_input(c, node, ins, n_args):
    x = _T(c.image(ins[0], node), 4, nchw=True)
    if any(t.const is None for t in ins[1:]):
        raise ConversionError("node %s: filter and bias must be constants" % node["name"])
    if len(ins) != 2 + n_args:
        raise ConversionError("node %s: %d inputs for num_args %d" % (node["name"], len(ins), n_args))
    _check_nhwc(node)
    return x


def _conv2d(fused):
    def fn(c, node, ins):
        acts = _fused_list(node) if fused else []
        x = _conv_input(c, node, ins, _attr(node, "num_args", 1) if fused else 0)
        w = ins[1].const.transpose(3, 2, 0, 1)  # HWIO → OIHW
        name = node["name"].replace("/", "_")
        args = [x.name, c.init(w, name + "_w")] + ([c.init(ins[2].const, name + "_b")] if fused else [])
        out = c.emit("Conv", args, "conv", strides=_spatial(node, "strides"), dilations=_spatial(node, "dilations"),
                     kernel_shape=list(w.shape[2:]), **_pad_attrs(node, w.shape[2:]))
        return _T(_activation(c, out, node, acts), 4, nchw=True)
    return fn


def _depthwise(fused):
    def fn(c, node, ins):
        acts = _fused_list(node) if fused else []
        x = _conv_input(c, node, ins, _attr(node, "num_args", 1) if fused else 0)
        kh, kw, ch, mult = ins[1].const.shape
        # TF output channel c·mult+m is ONNX group c's m-th output.
        w = ins[1].const.reshape(kh, kw, ch * mult).transpose(2, 0, 1).reshape(ch * mult, 1, kh, kw)
        name = node["name"].replace("/", "_")
        args = [x.name, c.init(w, name + "_w")] + ([c.init(ins[2].const, name + "_b")] if fused else [])
        out = c.emit("Conv", args, "dwconv", strides=_spatial(node, "strides"), dilations=_spatial(node, "dilations"),
                     kernel_shape=[kh, kw], group=ch, **_pad_attrs(node, [kh, kw]))
        return _T(_activation(c, out, node, acts), 4, nchw=True)
    return fn


def _conv_transpose(c, node, ins):
    """Conv2DBackpropInput(output_shape, filter, x): the gradient of a
    convolution, i.e. ONNX ConvTranspose with TF's padding made explicit."""
    shape, filt, x = ins
    x = _T(c.image(x, node), 4, nchw=True)
    if shape.const is None or filt.const is None:
        raise ConversionError("node %s: want a constant output shape and filter and a 4-D image input" % node["name"])
    _check_nhwc(node)
    if _spatial(node, "dilations") != [1, 1]:
        raise ConversionError("node %s: dilated transposed convolution is not supported" % node["name"])
    kh, kw = filt.const.shape[:2]
    strides = _spatial(node, "strides")
    out_hw = [int(v) for v in shape.const[1:3]]
    pads, extra = [0, 0, 0, 0], [0, 0]
    for i, (o, k, s) in enumerate(zip(out_hw, (kh, kw), strides)):
        if _attr(node, "padding") == "SAME":
            n_in = -(-o // s)
            total = max((n_in - 1) * s + k - o, 0)
        elif _attr(node, "padding") == "VALID":
            n_in = (o - k) // s + 1
            total = 0
        else:
            raise ConversionError("node %s: padding %s is not supported" % (node["name"], _attr(node, "padding")))
        pads[i], pads[i + 2] = total // 2, total - total // 2
        extra[i] = o - ((n_in - 1) * s + k - total)
    w = filt.const.transpose(3, 2, 0, 1)  # [kh, kw, out, in] → [in, out, kh, kw]
    name = node["name"].replace("/", "_")
    out = c.emit("ConvTranspose", [x.name, c.init(w, name + "_w")], "deconv", strides=strides,
                 kernel_shape=[kh, kw], pads=pads, output_padding=extra)
    return _T(out, 4, nchw=True)


def _unary(onnx_op):
    def fn(c, node, ins):
        x = ins[0]
        if onnx_op == "Relu6":
            out = c.emit("Clip", [x.name, c.init(np.float32(0), "zero"), c.init(np.float32(6), "six")], "relu6")
        elif onnx_op == "LeakyRelu":
            out = c.emit("LeakyRelu", [x.name], "leakyrelu", alpha=float(_attr(node, "alpha", 0.2)))
        else:
            out = c.emit(onnx_op, [x.name], onnx_op.lower())
        return _T(out, x.rank, nchw=x.nchw)
    return fn


def _addn(c, node, ins):
    if any(t.const is not None for t in ins) or len({t.nchw for t in ins}) != 1:
        raise ConversionError("node %s: AddN over constants or mixed layouts is not supported" % node["name"])
    return _T(c.emit("Sum", [t.name for t in ins], "sum"), ins[0].rank, nchw=ins[0].nchw)


def _resize_bilinear(c, node, ins):
    x, size = ins
    if size.const is None:
        raise ConversionError("node %s: want a constant size" % node["name"])
    x = _T(c.image(x, node), 4, nchw=True)
    if _attr(node, "align_corners", False):
        mode = "align_corners"
    elif _attr(node, "half_pixel_centers", False):
        mode = "half_pixel"
    else:
        mode = "asymmetric"
    # sizes = [N, C] of the input, then the constant [H, W].
    nc = c.emit("Slice", [c.emit("Shape", [x.name], "shape"), c.init(np.array([0], np.int64), "start"),
                          c.init(np.array([2], np.int64), "end")], "nc")
    sizes = c.emit("Concat", [nc, c.init(size.const.astype(np.int64), "hw")], "sizes", axis=0)
    out = c.emit("Resize", [x.name, "", "", sizes], "resize", mode="linear", coordinate_transformation_mode=mode)
    return _T(out, 4, nchw=True)


def _fused_matmul(c, node, ins):
    fused = _fused_list(node)
    a, b, bias = ins
    if a.const is not None or b.const is None or bias.const is None:
        raise ConversionError("node %s: want a value times a constant matrix plus a constant bias" % node["name"])
    if _attr(node, "transpose_a", False):
        raise ConversionError("node %s: transpose_a is not supported" % node["name"])
    if a.rank != 2:
        raise ConversionError("node %s: the left operand has rank %d, want 2" % (node["name"], a.rank))
    name = node["name"].replace("/", "_")
    out = c.emit("Gemm", [c.plain(a), c.init(b.const, name + "_w"), c.init(bias.const, name + "_b")], "gemm",
                 transB=1 if _attr(node, "transpose_b", False) else 0)
    return _T(_activation(c, out, node, fused), 2)


def _pool(onnx_op):
    def fn(c, node, ins):
        x = c.image(ins[0], node)
        _check_nhwc(node)
        out = c.emit(onnx_op, [x], onnx_op.lower(), kernel_shape=_spatial(node, "ksize"),
                     strides=_spatial(node, "strides"), **_pad_attrs(node))
        return _T(out, 4, nchw=True)
    return fn


def _squeeze(c, node, ins):
    x = ins[0]
    dims = _attr(node, "squeeze_dims", [])
    if not dims:
        raise ConversionError("node %s: Squeeze without squeeze_dims is not supported" % node["name"])
    dims = [d % x.rank for d in dims]
    if x.nchw and (3 in dims or not {1, 2} <= set(dims)):
        # Only dropping both spatial axes keeps NCHW's order equal to TF's.
        x = _T(c.plain(x), x.rank)
    if x.nchw:
        axes = [NHWC_TO_NCHW.index(d) for d in dims]
    else:
        axes = dims
    out = c.emit("Squeeze", [x.name, c.init(np.array(sorted(axes), np.int64), "axes")], "squeeze")
    return _T(out, x.rank - len(dims))


def _mean(c, node, ins):
    x, axes = ins
    if axes.const is None or x.const is not None:
        raise ConversionError("node %s: want the mean of a value over constant axes" % node["name"])
    dims = sorted({int(d) % x.rank for d in np.ravel(axes.const)})
    keep = bool(_attr(node, "keep_dims", False))
    if x.nchw and keep:
        # Kept dimensions leave the layout as it is (squeeze-excite's
        # spatial mean stays an NCHW [N, C, 1, 1]).
        out = c.emit("ReduceMean", [x.name], "mean", axes=sorted(NHWC_TO_NCHW.index(d) for d in dims), keepdims=1)
        return _T(out, 4, nchw=True)
    out = c.emit("ReduceMean", [c.plain(x)], "mean", axes=dims, keepdims=int(keep))
    return _T(out, x.rank if keep else x.rank - len(dims))


def _softmax(c, node, ins):
    x = ins[0]
    return _T(c.emit("Softmax", [c.plain(x)], "softmax", axis=-1), x.rank)


def _transpose(c, node, ins):
    x, perm = ins
    if perm.const is None:
        raise ConversionError("node %s: the permutation must be a constant" % node["name"])
    q = [int(v) for v in perm.const]
    if x.rank == 4:
        p_in = NHWC_TO_NCHW if x.nchw else [0, 1, 2, 3]
        # Held as NCHW, the result would be x's data as it is: no op (the
        # transposes an ONNX → TF export puts around each convolution).
        if [q[i] for i in NHWC_TO_NCHW] == p_in:
            return _T(x.name, 4, nchw=True)
        if q == p_in:
            return _T(x.name, 4)
        inv = [p_in.index(i) for i in range(4)]
        return _T(c.emit("Transpose", [x.name], "transpose", perm=[inv[i] for i in q]), 4)
    return _T(c.emit("Transpose", [c.plain(x)], "transpose", perm=q), x.rank)


def _pad(c, node, ins):
    x, pads = ins[0], ins[1]
    value = ins[2].const if len(ins) > 2 else np.float32(0)
    if pads.const is None or (len(ins) > 2 and ins[2].const is None):
        raise ConversionError("node %s: paddings and value must be constants" % node["name"])
    p = np.asarray(pads.const, np.int64)
    onnx_pads = np.concatenate([p[:, 0], p[:, 1]])
    out = c.emit("Pad", [c.plain(x), c.init(onnx_pads, "pads"), c.init(np.float32(value).reshape(()), "value")], "pad", mode="constant")
    return _T(out, x.rank)


def _concat(c, node, ins):
    *xs, axis = ins
    if axis.const is None or any(t.const is not None for t in xs):
        raise ConversionError("node %s: want values joined on a constant axis" % node["name"])
    return _T(c.emit("Concat", [c.plain(t) for t in xs], "concat", axis=int(axis.const)), xs[0].rank)


def _splitv(c, node, ins):
    x, sizes, dim = ins
    if sizes.const is None or dim.const is None:
        raise ConversionError("node %s: split sizes and axis must be constants" % node["name"])
    n = len(sizes.const)
    outs = [c.fresh("split") for _ in range(n)]
    c.onnx_nodes.append(helper.make_node("Split", [c.plain(x), c.init(np.asarray(sizes.const, np.int64), "sizes")], outs,
                                         name=outs[0], axis=int(dim.const)))
    return [_T(o, x.rank) for o in outs]


def _reshape(c, node, ins):
    x, shape = ins
    if shape.const is None:
        raise ConversionError("node %s: the shape must be a constant" % node["name"])
    return _T(c.emit("Reshape", [c.plain(x), c.init(np.asarray(shape.const, np.int64), "shape")], "reshape"), len(shape.const))


def _fold_only(c, node, ins):
    raise ConversionError("node %s: %s is supported only on constants" % (node["name"], node["op"]))


def _sparse_to_dense(node, indices, shape, values, default):
    out = np.full([int(d) for d in shape], default, dtype=np.asarray(default).dtype)
    idx = np.asarray(indices).reshape(-1, max(1, out.ndim)) if np.size(indices) else np.zeros((0, out.ndim), int)
    vals = np.broadcast_to(values, (len(idx),))
    for i, v in zip(idx, vals):
        out[tuple(i)] = v
    return out


# Ops computed at conversion when all their inputs are constants.
FOLD = {
    "Add": lambda n, a, b: a + b,
    "AddV2": lambda n, a, b: a + b,
    "Sub": lambda n, a, b: a - b,
    "Mul": lambda n, a, b: a * b,
    "SparseToDense": _sparse_to_dense,
}


OPS = {
    "Placeholder": _placeholder,
    "Const": _const,
    "Identity": _identity,
    "AddV2": _binary("Add"),
    "Add": _binary("Add"),
    "Sub": _binary("Sub"),
    "Mul": _binary("Mul"),
    "_FusedConv2D": _conv2d(fused=True),
    "FusedDepthwiseConv2dNative": _depthwise(fused=True),
    "Conv2D": _conv2d(fused=False),
    "DepthwiseConv2dNative": _depthwise(fused=False),
    "Conv2DBackpropInput": _conv_transpose,
    "Relu": _unary("Relu"),
    "Relu6": _unary("Relu6"),
    "Sigmoid": _unary("Sigmoid"),
    "AddN": _addn,
    "ResizeBilinear": _resize_bilinear,
    "_FusedMatMul": _fused_matmul,
    "AvgPool": _pool("AveragePool"),
    "MaxPool": _pool("MaxPool"),
    "LeakyRelu": _unary("LeakyRelu"),
    "Transpose": _transpose,
    "Pad": _pad,
    "PadV2": _pad,
    "ConcatV2": _concat,
    "SplitV": _splitv,
    "Reshape": _reshape,
    "SparseToDense": _fold_only,
    "Squeeze": _squeeze,
    "Softmax": _softmax,
    "Mean": _mean,
}


# ----------------------------------------------------------------------- cli

def shard_paths(model_path, model):
    """The shard files the manifest names, next to the model file; a wrapped
    shard X is X.min.js or X.js."""
    d = os.path.dirname(model_path)
    out = []
    for g in model["weightsManifest"]:
        for p in g["paths"]:
            for cand in (p, p + ".min.js", p + ".js"):
                if os.path.exists(os.path.join(d, cand)):
                    out.append(os.path.join(d, cand))
                    break
            else:
                raise ConversionError("shard %s (named by the manifest) not found next to %s" % (p, model_path))
    return out


def convert(model_path, weight_paths=None, nchw_input=False, outputs=None, opset=13, dynamic_batch=False):
    model = read_model_json(model_path)
    if model.get("format") not in (None, "graph-model"):
        raise ConversionError("%s: format %r is not a TF.js graph model" % (model_path, model.get("format")))
    paths = weight_paths or shard_paths(model_path, model)
    weights = decode_weights(model["weightsManifest"], [read_shard(p) for p in paths])
    return Converter(model, weights, nchw_input=nchw_input, outputs=outputs, opset=opset, dynamic_batch=dynamic_batch).run()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="model.json, or the JS module wrapping it")
    ap.add_argument("out", help="the ONNX file to write")
    ap.add_argument("--weights", nargs="+", help="shard files in manifest order (default: the manifest's paths)")
    ap.add_argument("--nchw-input", action="store_true", help="take 4-D inputs as NCHW instead of NHWC")
    ap.add_argument("--output", action="append", help="graph output node (default: the signature's)")
    ap.add_argument("--dynamic-batch", action="store_true", help="make the input's batch dimension symbolic (N) even where the graph fixes it")
    ap.add_argument("--opset", type=int, default=13)
    a = ap.parse_args(argv)
    try:
        m = convert(a.model, a.weights, a.nchw_input, a.output, a.opset, a.dynamic_batch)
    except ConversionError as e:
        print("tfjs2onnx: %s" % e, file=sys.stderr)
        return 2
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(m.SerializeToString())
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
