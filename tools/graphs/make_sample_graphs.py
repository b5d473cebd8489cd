#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the sample graphs of data/graphs/ (recsearch.graph, version 1).

    python3 tools/graphs/make_sample_graphs.py            # rewrite them all
    python3 tools/graphs/make_sample_graphs.py --check    # files up to date and valid?
    python3 tools/graphs/make_sample_graphs.py --out DIR  # write elsewhere

Standard library only, deterministic: the same script always writes the same
bytes. Each file is compact JSON with one tensor or operator per line, so
diffs stay readable.

Every graph goes through `check_graph` before it is written (and, with
--check, the files on disk too): it re-derives every operator's output
shapes from its kind, input shapes and attributes, independently of the
builders below, and checks the structure (unique names, dataflow in order,
tensor kinds, dtypes, attribute names). A graph that fails is not written.

Graphs:
  ffn.json          MLP 784-512-256-128-64-10, batch 32, f32 (MindSpore's
                    sharding-propagation example)
  gpt2_block.json   one GPT-2 (124M) transformer block, batch 8, seq 1024, f16
  bert_large.json   BERT-large pre-training, 24 layers, batch 32, seq 512, f16;
                    explicit attention in even layers, fused Attention in odd
  resnet50.json     ResNet-50 v1.5, batch 256, 3x224x224, f16
  tiny/*.json       graphs of <= 10 operators for exhaustive-search tests
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

FORMAT = "recsearch.graph"
VERSION = 1
MAX_FILE_BYTES = 2 * 1024 * 1024

DTYPE_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "f8": 1, "i64": 8, "i32": 4,
               "i16": 2, "i8": 1, "u8": 1, "bool": 1}
INT_DTYPES = {"i64", "i32", "i16", "i8", "u8"}
SOURCE_KINDS = {"input", "parameter", "constant"}


# --------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------

class Graph:
    """Collects tensors and operators in insertion order."""

    def __init__(self, name: str, description: str):
        self.name = name
        self.description = description
        self.tensors: list[dict] = []
        self.ops: list[dict] = []
        self._shape: dict[str, list[int]] = {}
        self._dtype: dict[str, str] = {}

    # Unproduced tensors.
    def source(self, name: str, shape, dtype: str, kind: str) -> str:
        assert kind in SOURCE_KINDS, kind
        return self._tensor(name, shape, dtype, kind)

    def input(self, name, shape, dtype):
        return self.source(name, shape, dtype, "input")

    def param(self, name, shape, dtype):
        return self.source(name, shape, dtype, "parameter")

    def const(self, name, shape, dtype):
        return self.source(name, shape, dtype, "constant")

    def _tensor(self, name, shape, dtype, kind=None) -> str:
        if name in self._shape:
            raise ValueError(f"{self.name}: tensor {name!r} declared twice")
        t = {"name": name, "shape": [int(d) for d in shape], "dtype": dtype}
        if kind is not None:
            t["kind"] = kind
        self.tensors.append(t)
        self._shape[name] = t["shape"]
        self._dtype[name] = dtype
        return name

    def shape(self, name: str) -> list[int]:
        return list(self._shape[name])

    def dtype(self, name: str) -> str:
        return self._dtype[name]

    def op(self, type_: str, name: str, inputs, outputs, attrs=None):
        """`outputs`: list of (tensor name, shape) or (tensor name, shape, dtype);
        the dtype defaults to the first input's. Returns the output names
        (a single name when there is one output)."""
        out_names = []
        for o in outputs:
            oname, oshape = o[0], o[1]
            odtype = o[2] if len(o) > 2 else self._dtype[inputs[0]]
            self._tensor(oname, oshape, odtype)
            out_names.append(oname)
        entry = {"name": name, "type": type_, "inputs": list(inputs), "outputs": out_names}
        if attrs:
            entry["attrs"] = attrs
        self.ops.append(entry)
        return out_names[0] if len(out_names) == 1 else out_names

    # Shorthands for the operators whose output keeps the input's shape.
    def same(self, type_: str, name: str, inputs, out: str, attrs=None) -> str:
        return self.op(type_, name, inputs, [(out, self.shape(inputs[0]))], attrs)

    def to_json_obj(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "name": self.name,
                "description": self.description,
                "tensors": self.tensors, "operators": self.ops}


def dumps_graph(obj: dict) -> str:
    """Compact JSON, one tensor / operator per line."""
    def d(x):
        return json.dumps(x, separators=(", ", ": "), ensure_ascii=True)

    head = ", ".join(f"{d(k)}: {d(obj[k])}" for k in obj if k not in ("tensors", "operators"))
    lines = ["{" + head + ",", ' "tensors": [']
    lines += ["  " + d(t) + ("," if i + 1 < len(obj["tensors"]) else "")
              for i, t in enumerate(obj["tensors"])]
    lines += [" ],", ' "operators": [']
    lines += ["  " + d(o) + ("," if i + 1 < len(obj["operators"]) else "")
              for i, o in enumerate(obj["operators"])]
    lines += [" ]", "}"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------

def ffn() -> Graph:
    """MindSpore's sharding-propagation example (FFN 784-512-256-128-64-10)."""
    g = Graph("ffn", "MLP 784-512-256-128-64-10, batch 32, f32, softmax cross-entropy loss")
    batch, dt = 32, "f32"
    sizes = [784, 512, 256, 128, 64, 10]
    h = g.input("x", [batch, sizes[0]], dt)
    labels = g.input("labels", [batch], "i32")
    for i in range(1, len(sizes)):
        fin, fout = sizes[i - 1], sizes[i]
        w = g.param(f"dense{i}.weight", [fin, fout], dt)
        b = g.param(f"dense{i}.bias", [fout], dt)
        h = g.op("MatMul", f"dense{i}.matmul", [h, w], [(f"dense{i}.mm", [batch, fout])],
                 {"transpose_a": False, "transpose_b": False})
        h = g.same("BiasAdd", f"dense{i}.bias_add", [h, b], f"dense{i}.out")
        if i + 1 < len(sizes):
            h = g.same("ReLU", f"relu{i}", [h], f"relu{i}.out")
    g.op("SoftmaxCrossEntropy", "loss", [h, labels], [("loss", [], "f32")],
         {"reduction": "mean"})
    return g


def gpt2_block() -> Graph:
    """One GPT-2 (124M) block: pre-LN, fused QKV projection, causal mask."""
    g = Graph("gpt2_block", "one GPT-2 124M transformer block (pre-LN), batch 8, seq 1024, "
              "hidden 768, 12 heads, f16")
    b, s, h, nh, dt = 8, 1024, 768, 12, "f16"
    hd = h // nh
    ffn_dim = 4 * h
    drop = {"ratio": 0.1}

    x = g.input("x", [b, s, h], dt)
    ln1_g = g.param("ln_1.weight", [h], dt)
    ln1_b = g.param("ln_1.bias", [h], dt)
    w_qkv = g.param("attn.c_attn.weight", [h, 3 * h], dt)
    b_qkv = g.param("attn.c_attn.bias", [3 * h], dt)
    scale = g.const("attn.scale", [], dt)
    mask = g.const("attn.causal_mask", [1, 1, s, s], dt)
    w_proj = g.param("attn.c_proj.weight", [h, h], dt)
    b_proj = g.param("attn.c_proj.bias", [h], dt)
    ln2_g = g.param("ln_2.weight", [h], dt)
    ln2_b = g.param("ln_2.bias", [h], dt)
    w_fc = g.param("mlp.c_fc.weight", [h, ffn_dim], dt)
    b_fc = g.param("mlp.c_fc.bias", [ffn_dim], dt)
    w_fc2 = g.param("mlp.c_proj.weight", [ffn_dim, h], dt)
    b_fc2 = g.param("mlp.c_proj.bias", [h], dt)

    a = g.same("LayerNorm", "ln_1", [x, ln1_g, ln1_b], "ln_1.out",
               {"axis": -1, "epsilon": 1e-5})
    qkv = g.op("MatMul", "attn.c_attn.matmul", [a, w_qkv], [("attn.c_attn.mm", [b, s, 3 * h])])
    qkv = g.same("BiasAdd", "attn.c_attn.bias_add", [qkv, b_qkv], "attn.qkv")
    q, k, v = g.op("Split", "attn.split_qkv", [qkv],
                   [(f"attn.{n}", [b, s, h]) for n in "qkv"], {"axis": 2})
    heads = {}
    for n, t in (("q", q), ("k", k), ("v", v)):
        r = g.op("Reshape", f"attn.{n}.split_heads", [t], [(f"attn.{n}.heads", [b, s, nh, hd])])
        if n == "k":  # k^T directly: [b, nh, hd, s]
            heads[n] = g.op("Transpose", "attn.k.transpose", [r], [("attn.kT", [b, nh, hd, s])],
                            {"perm": [0, 2, 3, 1]})
        else:
            heads[n] = g.op("Transpose", f"attn.{n}.transpose", [r],
                            [(f"attn.{n}.bhsd", [b, nh, s, hd])], {"perm": [0, 2, 1, 3]})
    sc = g.op("BatchMatMul", "attn.qk", [heads["q"], heads["k"]], [("attn.scores", [b, nh, s, s])])
    sc = g.same("Mul", "attn.scale_mul", [sc, scale], "attn.scores_scaled")
    sc = g.same("Add", "attn.mask_add", [sc, mask], "attn.scores_masked")
    p = g.same("Softmax", "attn.softmax", [sc], "attn.probs", {"axis": -1})
    p = g.same("Dropout", "attn.attn_dropout", [p], "attn.probs_dropped", drop)
    ctx = g.op("BatchMatMul", "attn.pv", [p, heads["v"]], [("attn.ctx", [b, nh, s, hd])])
    ctx = g.op("Transpose", "attn.merge_transpose", [ctx], [("attn.ctx_t", [b, s, nh, hd])],
               {"perm": [0, 2, 1, 3]})
    ctx = g.op("Reshape", "attn.merge_heads", [ctx], [("attn.ctx_merged", [b, s, h])])
    o = g.op("MatMul", "attn.c_proj.matmul", [ctx, w_proj], [("attn.c_proj.mm", [b, s, h])])
    o = g.same("BiasAdd", "attn.c_proj.bias_add", [o, b_proj], "attn.c_proj.out")
    o = g.same("Dropout", "attn.resid_dropout", [o], "attn.out", drop)
    r1 = g.same("Add", "residual_1", [x, o], "residual_1.out")

    m = g.same("LayerNorm", "ln_2", [r1, ln2_g, ln2_b], "ln_2.out",
               {"axis": -1, "epsilon": 1e-5})
    m = g.op("MatMul", "mlp.c_fc.matmul", [m, w_fc], [("mlp.c_fc.mm", [b, s, ffn_dim])])
    m = g.same("BiasAdd", "mlp.c_fc.bias_add", [m, b_fc], "mlp.c_fc.out")
    m = g.same("GeLU", "mlp.gelu", [m], "mlp.gelu.out", {"approximate": "tanh"})
    m = g.op("MatMul", "mlp.c_proj.matmul", [m, w_fc2], [("mlp.c_proj.mm", [b, s, h])])
    m = g.same("BiasAdd", "mlp.c_proj.bias_add", [m, b_fc2], "mlp.c_proj.out")
    m = g.same("Dropout", "mlp.dropout", [m], "mlp.out", drop)
    g.same("Add", "residual_2", [r1, m], "y")
    return g


def bert_large() -> Graph:
    """BERT-large pre-training (MLM head), post-LN layers."""
    g = Graph("bert_large", "BERT-large pre-training (MLM), 24 layers, hidden 1024, 16 heads, "
              "intermediate 4096, seq 512, batch 32, vocab 30522, f16; explicit attention in "
              "even layers, fused Attention in odd layers")
    b, s, h, nh, inter, vocab, layers, dt = 32, 512, 1024, 16, 4096, 30522, 24, "f16"
    hd = h // nh
    drop = {"ratio": 0.1}
    ln_attrs = {"axis": -1, "epsilon": 1e-12}

    ids = g.input("input_ids", [b, s], "i32")
    pos_ids = g.const("position_ids", [1, s], "i32")
    labels = g.input("mlm_labels", [b, s], "i32")
    word = g.param("embeddings.word_embeddings.weight", [vocab, h], dt)
    pos = g.param("embeddings.position_embeddings.weight", [s, h], dt)
    e_g = g.param("embeddings.LayerNorm.weight", [h], dt)
    e_b = g.param("embeddings.LayerNorm.bias", [h], dt)

    we = g.op("Gather", "embeddings.word_gather", [word, ids], [("embeddings.words", [b, s, h], dt)],
              {"axis": 0})
    pe = g.op("Gather", "embeddings.position_gather", [pos, pos_ids],
              [("embeddings.positions", [1, s, h], dt)], {"axis": 0})
    x = g.op("Add", "embeddings.add", [we, pe], [("embeddings.sum", [b, s, h])])
    x = g.same("LayerNorm", "embeddings.LayerNorm", [x, e_g, e_b], "embeddings.ln", ln_attrs)
    x = g.same("Dropout", "embeddings.dropout", [x], "embeddings.out", drop)

    for layer in range(layers):
        a = f"layer{layer}.attn"
        f = f"layer{layer}.ffn"
        fused = layer % 2 == 1
        heads = {}
        for n in ("query", "key", "value"):
            w = g.param(f"{a}.{n}.weight", [h, h], dt)
            bias = g.param(f"{a}.{n}.bias", [h], dt)
            t = g.op("MatMul", f"{a}.{n}.matmul", [x, w], [(f"{a}.{n}.mm", [b, s, h])])
            t = g.same("BiasAdd", f"{a}.{n}.bias_add", [t, bias], f"{a}.{n}.out")
            t = g.op("Reshape", f"{a}.{n}.split_heads", [t], [(f"{a}.{n}.heads", [b, s, nh, hd])])
            if n == "key" and not fused:
                heads[n] = g.op("Transpose", f"{a}.key.transpose", [t],
                                [(f"{a}.keyT", [b, nh, hd, s])], {"perm": [0, 2, 3, 1]})
            else:
                heads[n] = g.op("Transpose", f"{a}.{n}.transpose", [t],
                                [(f"{a}.{n}.bhsd", [b, nh, s, hd])], {"perm": [0, 2, 1, 3]})
        if fused:
            ctx = g.op("Attention", f"{a}.attention", [heads["query"], heads["key"], heads["value"]],
                       [(f"{a}.context", [b, nh, s, hd])], {"causal": False})
        else:
            scale = g.const(f"{a}.scale", [], dt)
            sc = g.op("BatchMatMul", f"{a}.qk", [heads["query"], heads["key"]],
                      [(f"{a}.scores", [b, nh, s, s])])
            sc = g.same("Mul", f"{a}.scale_mul", [sc, scale], f"{a}.scores_scaled")
            pr = g.same("Softmax", f"{a}.softmax", [sc], f"{a}.probs", {"axis": -1})
            pr = g.same("Dropout", f"{a}.probs_dropout", [pr], f"{a}.probs_dropped", drop)
            ctx = g.op("BatchMatMul", f"{a}.pv", [pr, heads["value"]],
                       [(f"{a}.context", [b, nh, s, hd])])
        ctx = g.op("Transpose", f"{a}.merge_transpose", [ctx], [(f"{a}.context_t", [b, s, nh, hd])],
                   {"perm": [0, 2, 1, 3]})
        ctx = g.op("Reshape", f"{a}.merge_heads", [ctx], [(f"{a}.context_merged", [b, s, h])])

        w = g.param(f"{a}.out.weight", [h, h], dt)
        bias = g.param(f"{a}.out.bias", [h], dt)
        ln_g = g.param(f"{a}.LayerNorm.weight", [h], dt)
        ln_b = g.param(f"{a}.LayerNorm.bias", [h], dt)
        t = g.op("MatMul", f"{a}.out.matmul", [ctx, w], [(f"{a}.out.mm", [b, s, h])])
        t = g.same("BiasAdd", f"{a}.out.bias_add", [t, bias], f"{a}.out.out")
        t = g.same("Dropout", f"{a}.out.dropout", [t], f"{a}.out.dropped", drop)
        t = g.same("Add", f"{a}.residual", [t, x], f"{a}.sum")
        x = g.same("LayerNorm", f"{a}.LayerNorm", [t, ln_g, ln_b], f"{a}.y", ln_attrs)

        w1 = g.param(f"{f}.fc1.weight", [h, inter], dt)
        b1 = g.param(f"{f}.fc1.bias", [inter], dt)
        w2 = g.param(f"{f}.fc2.weight", [inter, h], dt)
        b2 = g.param(f"{f}.fc2.bias", [h], dt)
        ln_g = g.param(f"{f}.LayerNorm.weight", [h], dt)
        ln_b = g.param(f"{f}.LayerNorm.bias", [h], dt)
        t = g.op("MatMul", f"{f}.fc1.matmul", [x, w1], [(f"{f}.fc1.mm", [b, s, inter])])
        t = g.same("BiasAdd", f"{f}.fc1.bias_add", [t, b1], f"{f}.fc1.out")
        t = g.same("GeLU", f"{f}.gelu", [t], f"{f}.gelu.out", {"approximate": "none"})
        t = g.op("MatMul", f"{f}.fc2.matmul", [t, w2], [(f"{f}.fc2.mm", [b, s, h])])
        t = g.same("BiasAdd", f"{f}.fc2.bias_add", [t, b2], f"{f}.fc2.out")
        t = g.same("Dropout", f"{f}.dropout", [t], f"{f}.dropped", drop)
        t = g.same("Add", f"{f}.residual", [t, x], f"{f}.sum")
        x = g.same("LayerNorm", f"{f}.LayerNorm", [t, ln_g, ln_b], f"{f}.y", ln_attrs)

    c = "mlm"
    w = g.param(f"{c}.transform.weight", [h, h], dt)
    bias = g.param(f"{c}.transform.bias", [h], dt)
    ln_g = g.param(f"{c}.LayerNorm.weight", [h], dt)
    ln_b = g.param(f"{c}.LayerNorm.bias", [h], dt)
    # The decoder shares the word table in BERT; a separate [h, vocab]
    # parameter keeps the graph simple.
    w_dec = g.param(f"{c}.decoder.weight", [h, vocab], dt)
    b_dec = g.param(f"{c}.decoder.bias", [vocab], dt)
    t = g.op("MatMul", f"{c}.transform.matmul", [x, w], [(f"{c}.transform.mm", [b, s, h])])
    t = g.same("BiasAdd", f"{c}.transform.bias_add", [t, bias], f"{c}.transform.out")
    t = g.same("GeLU", f"{c}.gelu", [t], f"{c}.gelu.out", {"approximate": "none"})
    t = g.same("LayerNorm", f"{c}.LayerNorm", [t, ln_g, ln_b], f"{c}.LayerNorm.out", ln_attrs)
    t = g.op("MatMul", f"{c}.decoder.matmul", [t, w_dec], [(f"{c}.decoder.mm", [b, s, vocab])])
    t = g.same("BiasAdd", f"{c}.decoder.bias_add", [t, b_dec], f"{c}.logits")
    g.op("SoftmaxCrossEntropy", "mlm_loss", [t, labels], [("loss", [], "f32")],
         {"reduction": "mean"})
    return g


def conv_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dil: int = 1) -> int:
    return (size + pad_lo + pad_hi - ((k - 1) * dil + 1)) // stride + 1


def resnet50() -> Graph:
    """ResNet-50 v1.5 (stride in the 3x3 conv of each downsampling block)."""
    g = Graph("resnet50", "ResNet-50 v1.5, batch 256, 3x224x224, f16, softmax cross-entropy loss")
    n, dt = 256, "f16"
    x = g.input("images", [n, 3, 224, 224], dt)
    labels = g.input("labels", [n], "i32")

    def conv_bn(prefix: str, t: str, cout: int, k: int, stride: int, relu: bool) -> str:
        _, cin, hh, ww = g.shape(t)
        pad = (k - 1) // 2
        w = g.param(f"{prefix}.conv.weight", [cout, cin, k, k], dt)
        ho = conv_out(hh, k, stride, pad, pad)
        wo = conv_out(ww, k, stride, pad, pad)
        y = g.op("Conv2D", f"{prefix}.conv", [t, w], [(f"{prefix}.conv.out", [n, cout, ho, wo])],
                 {"strides": [stride, stride], "pads": [pad, pad, pad, pad],
                  "dilations": [1, 1], "group": 1})
        bn = [g.param(f"{prefix}.bn.weight", [cout], dt), g.param(f"{prefix}.bn.bias", [cout], dt),
              g.const(f"{prefix}.bn.running_mean", [cout], dt),
              g.const(f"{prefix}.bn.running_var", [cout], dt)]
        y = g.same("BatchNorm", f"{prefix}.bn", [y] + bn, f"{prefix}.bn.out", {"epsilon": 1e-5})
        if relu:
            y = g.same("ReLU", f"{prefix}.relu", [y], f"{prefix}.relu.out")
        return y

    t = conv_bn("stem", x, 64, 7, 2, relu=True)
    _, c, hh, ww = g.shape(t)
    t = g.op("MaxPool", "stem.maxpool", [t],
             [("stem.maxpool.out", [n, c, conv_out(hh, 3, 2, 1, 1), conv_out(ww, 3, 2, 1, 1)])],
             {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})

    for si, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
        for bi in range(blocks):
            p = f"layer{si + 1}.{bi}"
            stride = 2 if (bi == 0 and si > 0) else 1
            y = conv_bn(f"{p}.conv1", t, width, 1, 1, relu=True)
            y = conv_bn(f"{p}.conv2", y, width, 3, stride, relu=True)
            y = conv_bn(f"{p}.conv3", y, width * 4, 1, 1, relu=False)
            shortcut = t
            if bi == 0:
                shortcut = conv_bn(f"{p}.downsample", t, width * 4, 1, stride, relu=False)
            y = g.same("Add", f"{p}.add", [y, shortcut], f"{p}.sum")
            t = g.same("ReLU", f"{p}.relu", [y], f"{p}.out")

    _, c, _, _ = g.shape(t)
    t = g.op("GlobalAvgPool", "avgpool", [t], [("avgpool.out", [n, c, 1, 1])])
    t = g.op("Flatten", "flatten", [t], [("flatten.out", [n, c])], {"axis": 1})
    w = g.param("fc.weight", [c, 1000], dt)
    bias = g.param("fc.bias", [1000], dt)
    t = g.op("MatMul", "fc.matmul", [t, w], [("fc.mm", [n, 1000])])
    t = g.same("BiasAdd", "fc.bias_add", [t, bias], "logits")
    g.op("SoftmaxCrossEntropy", "loss", [t, labels], [("loss", [], "f32")], {"reduction": "mean"})
    return g


def tiny_mlp() -> Graph:
    g = Graph("tiny_mlp", "2-layer MLP with huge weights (256 MiB each) and a small batch, f32")
    b, h, f, dt = 8, 4096, 16384, "f32"
    x = g.input("x", [b, h], dt)
    labels = g.input("labels", [b], "i32")
    w1 = g.param("w1", [h, f], dt)
    w2 = g.param("w2", [f, h], dt)
    t = g.op("MatMul", "dense1", [x, w1], [("h1", [b, f])])
    t = g.same("ReLU", "relu1", [t], "a1")
    t = g.op("MatMul", "dense2", [t, w2], [("logits", [b, h])])
    g.op("SoftmaxCrossEntropy", "loss", [t, labels], [("loss", [], "f32")], {"reduction": "mean"})
    return g


def tiny_convnet() -> Graph:
    g = Graph("tiny_convnet", "small conv net, batch 512, 3x32x32, small weights, f32")
    n, dt = 512, "f32"
    x = g.input("images", [n, 3, 32, 32], dt)
    labels = g.input("labels", [n], "i32")
    w1 = g.param("conv1.weight", [32, 3, 3, 3], dt)
    b1 = g.param("conv1.bias", [32], dt)
    w2 = g.param("conv2.weight", [64, 32, 3, 3], dt)
    wf = g.param("fc.weight", [64, 10], dt)
    bf = g.param("fc.bias", [10], dt)
    conv = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}
    t = g.op("Conv2D", "conv1", [x, w1, b1], [("conv1.out", [n, 32, 32, 32])], conv)
    t = g.same("ReLU", "relu1", [t], "relu1.out")
    t = g.op("MaxPool", "pool1", [t], [("pool1.out", [n, 32, 16, 16])],
             {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]})
    t = g.op("Conv2D", "conv2", [t, w2], [("conv2.out", [n, 64, 16, 16])], conv)
    t = g.same("ReLU", "relu2", [t], "relu2.out")
    t = g.op("GlobalAvgPool", "gap", [t], [("gap.out", [n, 64, 1, 1])])
    t = g.op("Flatten", "flatten", [t], [("flatten.out", [n, 64])], {"axis": 1})
    t = g.op("MatMul", "fc", [t, wf], [("fc.mm", [n, 10])])
    t = g.same("BiasAdd", "fc.bias_add", [t, bf], "logits")
    g.op("SoftmaxCrossEntropy", "loss", [t, labels], [("loss", [], "f32")], {"reduction": "mean"})
    return g


def tiny_wide_matmul() -> Graph:
    g = Graph("tiny_wide_matmul", "one wide MatMul (w [1024, 65536], 256 MiB) + bias + ReLU, f32")
    b, k, m, dt = 64, 1024, 65536, "f32"
    x = g.input("x", [b, k], dt)
    w = g.param("w", [k, m], dt)
    bias = g.param("b", [m], dt)
    t = g.op("MatMul", "wide", [x, w], [("wide.mm", [b, m])])
    t = g.same("BiasAdd", "wide.bias_add", [t, bias], "wide.out")
    g.same("ReLU", "relu", [t], "y")
    return g


def tiny_embedding() -> Graph:
    g = Graph("tiny_embedding", "embedding lookup in a [262144, 4096] f32 table (4 GiB) + MatMul "
              "+ loss")
    b, s, vocab, h, out, dt = 8, 128, 262144, 4096, 1024, "f32"
    ids = g.input("ids", [b, s], "i32")
    labels = g.input("labels", [b, s], "i32")
    table = g.param("embedding.weight", [vocab, h], dt)
    w = g.param("proj.weight", [h, out], dt)
    e = g.op("Gather", "embedding", [table, ids], [("embedding.out", [b, s, h], dt)], {"axis": 0})
    t = g.op("MatMul", "proj", [e, w], [("logits", [b, s, out])])
    g.op("SoftmaxCrossEntropy", "loss", [t, labels], [("loss", [], "f32")], {"reduction": "mean"})
    return g


GRAPHS = {
    "ffn.json": ffn,
    "gpt2_block.json": gpt2_block,
    "bert_large.json": bert_large,
    "resnet50.json": resnet50,
    "tiny/mlp_huge_weights.json": tiny_mlp,
    "tiny/convnet.json": tiny_convnet,
    "tiny/wide_matmul.json": tiny_wide_matmul,
    "tiny/embedding.json": tiny_embedding,
}
TINY_MAX_OPS = 10
# Operator names stay short enough for the plan table's name column.
MAX_OP_NAME = 40


# --------------------------------------------------------------------------
# Checker: re-derives every output shape from the kind; independent of the
# builders above.
# --------------------------------------------------------------------------

class CheckError(Exception):
    pass


# Attribute names each kind may carry (docs/formats.md, Operator kinds; ONNX names).
KNOWN_ATTRS = {
    "MatMul": {"transpose_a", "transpose_b"},
    "BatchMatMul": {"transpose_a", "transpose_b"},
    "Conv2D": {"strides", "pads", "dilations", "group"},
    "MaxPool": {"kernel_shape", "strides", "pads"},
    "AvgPool": {"kernel_shape", "strides", "pads"},
    "GlobalAvgPool": set(),
    "BatchNorm": {"epsilon"},
    "LayerNorm": {"axis", "epsilon"},
    "RMSNorm": {"axis", "epsilon"},
    "Softmax": {"axis"},
    "LogSoftmax": {"axis"},
    "Reshape": set(),
    "Flatten": {"axis"},
    "Transpose": {"perm"},
    "Split": {"axis"},
    "Concat": {"axis"},
    "Gather": {"axis"},
    "SoftmaxCrossEntropy": {"reduction"},
    "Attention": {"causal"},
    "Dropout": {"ratio"},
    "BiasAdd": set(),
    "GeLU": {"approximate"},
}
UNARY = {"ReLU", "GeLU", "SiLU", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Dropout",
         "Identity"}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum"}
for _k in UNARY | BINARY:
    KNOWN_ATTRS.setdefault(_k, set())  # Dropout and GeLU keep theirs


def prod(xs) -> int:
    return math.prod(xs) if xs else 1


def broadcast(a: list[int], b: list[int]) -> list[int]:
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        if da != db and da != 1 and db != 1:
            raise CheckError(f"shapes {a} and {b} do not broadcast")
        out.append(db if da == 1 else da)
    return out[::-1]


def norm_axis(axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise CheckError(f"axis {axis} out of range for rank {rank}")
    return a


def window_out(size, k, s, lo, hi, dil=1):
    o = (size + lo + hi - ((k - 1) * dil + 1)) // s + 1
    if o < 1:
        raise CheckError(f"window {k} stride {s} pads {lo},{hi} leaves no output of {size}")
    return o


def infer(op: dict, shapes: list[list[int]], dtypes: list[str]):
    """Returns the list of output shapes the kind implies, or None entries
    where only the output tensor says (Reshape); raises CheckError."""
    t = op["type"]
    at = op.get("attrs", {})
    nin = len(shapes)

    def need(lo, hi=None):
        if not (lo <= nin <= (hi if hi is not None else lo)):
            raise CheckError(f"{t} takes {lo}..{hi or lo} inputs, has {nin}")

    if t in ("MatMul", "BatchMatMul"):
        need(2)
        a, b = list(shapes[0]), list(shapes[1])
        if len(a) < 2 or len(b) < 2:
            raise CheckError(f"{t} operands must have rank >= 2: {a}, {b}")
        if at.get("transpose_a", False):
            a[-2], a[-1] = a[-1], a[-2]
        if at.get("transpose_b", False):
            b[-2], b[-1] = b[-1], b[-2]
        if a[-1] != b[-2]:
            raise CheckError(f"{t} inner dims differ: {a} x {b}")
        return [broadcast(a[:-2], b[:-2]) + [a[-2], b[-1]]]
    if t == "Conv2D":
        need(2, 3)
        x, w = shapes[0], shapes[1]
        if len(x) != 4 or len(w) != 4:
            raise CheckError("Conv2D wants x NCHW and w OIHW")
        grp = at.get("group", 1)
        st = at.get("strides", [1, 1])
        pads = at.get("pads", [0, 0, 0, 0])
        dil = at.get("dilations", [1, 1])
        if x[1] != w[1] * grp or w[0] % grp:
            raise CheckError(f"Conv2D channels: x {x}, w {w}, group {grp}")
        if nin == 3 and shapes[2] != [w[0]]:
            raise CheckError(f"Conv2D bias {shapes[2]} != [{w[0]}]")
        return [[x[0], w[0], window_out(x[2], w[2], st[0], pads[0], pads[2], dil[0]),
                 window_out(x[3], w[3], st[1], pads[1], pads[3], dil[1])]]
    if t in ("MaxPool", "AvgPool"):
        need(1)
        x = shapes[0]
        ks = at["kernel_shape"]
        st = at.get("strides", ks)
        sp = len(ks)
        pads = at.get("pads", [0] * (2 * sp))
        return [x[:2] + [window_out(x[2 + i], ks[i], st[i], pads[i], pads[sp + i])
                         for i in range(sp)]]
    if t == "GlobalAvgPool":
        need(1)
        return [shapes[0][:2] + [1] * (len(shapes[0]) - 2)]
    if t == "BatchNorm":
        need(3, 5)
        x = shapes[0]
        for s in shapes[1:]:
            if s != [x[1]]:
                raise CheckError(f"BatchNorm parameter {s} != [{x[1]}]")
        return [x]
    if t in ("LayerNorm", "RMSNorm"):
        need(2, 3)
        x = shapes[0]
        ax = norm_axis(at.get("axis", -1), len(x))
        for s in shapes[1:]:
            if s != x[ax:]:
                raise CheckError(f"{t} parameter {s} != normalized shape {x[ax:]}")
        return [x]
    if t in ("Softmax", "LogSoftmax"):
        need(1)
        norm_axis(at.get("axis", -1), len(shapes[0]))
        return [shapes[0]]
    if t in UNARY or t == "Cast":
        need(1)
        return [shapes[0]]
    if t in BINARY:
        need(2)
        return [broadcast(shapes[0], shapes[1])]
    if t == "BiasAdd":
        need(2)
        x, b = shapes
        if b != [x[-1]]:
            raise CheckError(f"BiasAdd bias {b} != [{x[-1]}]")
        return [x]
    if t == "Reshape":
        need(1)
        return [None]
    if t == "Flatten":
        need(1)
        x = shapes[0]
        ax = at.get("axis", 1)
        ax = ax + len(x) if ax < 0 else ax
        return [[prod(x[:ax]), prod(x[ax:])]]
    if t == "Transpose":
        need(1)
        x = shapes[0]
        perm = at.get("perm", list(range(len(x)))[::-1])
        if sorted(perm) != list(range(len(x))):
            raise CheckError(f"perm {perm} is not a permutation of rank {len(x)}")
        return [[x[p] for p in perm]]
    if t == "Split":
        need(1)
        return None  # checked against the outputs by the caller
    if t == "Concat":
        ax = norm_axis(at.get("axis", 0), len(shapes[0]))
        out = list(shapes[0])
        for s in shapes[1:]:
            if len(s) != len(out) or any(s[i] != out[i] for i in range(len(s)) if i != ax):
                raise CheckError(f"Concat operands {shapes} differ off axis {ax}")
            out[ax] += s[ax]
        return [out]
    if t == "Gather":
        need(2)
        table, idx = shapes
        if dtypes[1] not in INT_DTYPES:
            raise CheckError(f"Gather indices have dtype {dtypes[1]}")
        ax = norm_axis(at.get("axis", 0), len(table))
        return [table[:ax] + idx + table[ax + 1:]]
    if t == "SoftmaxCrossEntropy":
        need(2)
        logits, labels = shapes
        if dtypes[1] not in INT_DTYPES:
            raise CheckError(f"SoftmaxCrossEntropy labels have dtype {dtypes[1]}")
        if labels != logits[:-1]:
            raise CheckError(f"labels {labels} != logits {logits} without the class dim")
        red = at.get("reduction", "mean")
        if red not in ("mean", "sum", "none"):
            raise CheckError(f"reduction {red!r}")
        return [[] if red != "none" else labels]
    if t == "Attention":
        need(3, 4)
        q, k, v = shapes[:3]
        if len(q) != 4 or len(k) != 4 or len(v) != 4:
            raise CheckError("Attention wants q, k, v of rank 4 [b,h,s,d]")
        if q[:2] != k[:2] or k[:3] != v[:3] or q[3] != k[3]:
            raise CheckError(f"Attention q {q}, k {k}, v {v} disagree")
        return [q[:3] + [v[3]]]
    raise CheckError(f"the checker does not know kind {t!r}")


def check_graph(obj: dict) -> None:
    """Raises CheckError naming the graph, the JSON path and the problem."""
    name = obj.get("name", "?")

    def fail(path, msg):
        raise CheckError(f"{name}: {path}: {msg}")

    if obj.get("format") != FORMAT or obj.get("version") != VERSION:
        fail("/format", "not a recsearch.graph version 1")
    shapes, dtypes, kinds, produced, consumed = {}, {}, {}, {}, set()
    for i, t in enumerate(obj["tensors"]):
        p = f"/tensors/{i}"
        if t["name"] in shapes:
            fail(p, f"duplicate tensor {t['name']!r}")
        if t["dtype"] not in DTYPE_BYTES:
            fail(p, f"unknown dtype {t['dtype']!r}")
        if not all(isinstance(d, int) and d >= 1 for d in t["shape"]):
            fail(p, f"bad shape {t['shape']}")
        if "kind" in t and t["kind"] not in SOURCE_KINDS:
            fail(p, f"unknown kind {t['kind']!r}")
        shapes[t["name"]] = t["shape"]
        dtypes[t["name"]] = t["dtype"]
        kinds[t["name"]] = t.get("kind")
    op_names = set()
    for i, op in enumerate(obj["operators"]):
        p = f"/operators/{i}"
        if op["name"] in op_names:
            fail(p, f"duplicate operator {op['name']!r}")
        if len(op["name"]) > MAX_OP_NAME:
            fail(p + "/name", f"{op['name']!r} is longer than {MAX_OP_NAME} characters")
        op_names.add(op["name"])
        allowed = KNOWN_ATTRS.get(op["type"])
        if allowed is None:
            fail(p + "/type", f"kind {op['type']!r} unknown to the checker")
        for a in op.get("attrs", {}):
            if a not in allowed:
                fail(f"{p}/attrs/{a}", f"{op['type']} has no attribute {a!r}")
        for j, tn in enumerate(op["inputs"]):
            if tn not in shapes:
                fail(f"{p}/inputs/{j}", f"unknown tensor {tn!r}")
            if kinds[tn] is None and tn not in produced:
                fail(f"{p}/inputs/{j}", f"{tn!r} is used before it is produced")
            consumed.add(tn)
        for j, tn in enumerate(op["outputs"]):
            if tn not in shapes:
                fail(f"{p}/outputs/{j}", f"unknown tensor {tn!r}")
            if tn in produced:
                fail(f"{p}/outputs/{j}", f"{tn!r} produced twice")
            if kinds[tn] is not None:
                fail(f"{p}/outputs/{j}", f"produced tensor {tn!r} has kind {kinds[tn]!r}")
            produced[tn] = i
        ins = [shapes[tn] for tn in op["inputs"]]
        outs = [shapes[tn] for tn in op["outputs"]]
        try:
            inferred = infer(op, ins, [dtypes[tn] for tn in op["inputs"]])
        except CheckError as e:
            fail(p, str(e))
        if op["type"] == "Split":
            ax = norm_axis(op.get("attrs", {}).get("axis", 0), len(ins[0]))
            if sum(o[ax] for o in outs) != ins[0][ax] or any(
                    o[:ax] + o[ax + 1:] != ins[0][:ax] + ins[0][ax + 1:] for o in outs):
                fail(p, f"Split outputs {outs} do not tile {ins[0]} on axis {ax}")
            inferred = outs
        if len(inferred) != len(outs):
            fail(p + "/outputs", f"{op['type']} has {len(inferred)} outputs, not {len(outs)}")
        for j, (want, got) in enumerate(zip(inferred, outs)):
            if want is None:
                if prod(got) != prod(ins[0]):
                    fail(f"{p}/outputs/{j}", f"{got} has not the element count of {ins[0]}")
            elif want != got:
                fail(f"{p}/outputs/{j}", f"shape {got}, but {op['type']} implies {want}")
        # dtypes: value-preserving kinds keep the first input's dtype.
        if op["type"] not in ("SoftmaxCrossEntropy", "Cast"):
            src = dtypes[op["inputs"][0]]  # Gather: the table's
            for tn in op["outputs"]:
                if dtypes[tn] != src:
                    fail(p, f"output {tn!r} is {dtypes[tn]}, input is {src}")
    for t in obj["tensors"]:
        if kinds[t["name"]] is None and t["name"] not in produced:
            fail("/tensors", f"{t['name']!r} has no kind and no producer")
        if kinds[t["name"]] is not None and t["name"] not in consumed:
            fail("/tensors", f"{t['name']!r} ({kinds[t['name']]}) is never used")


def summary(obj: dict) -> dict:
    params = sum(prod(t["shape"]) * DTYPE_BYTES[t["dtype"]] for t in obj["tensors"]
                 if t.get("kind") == "parameter")
    return {"operators": len(obj["operators"]), "tensors": len(obj["tensors"]),
            "parameter_bytes": params}


# --------------------------------------------------------------------------

def main(argv=None) -> int:
    root = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=root / "data" / "graphs",
                    help="output folder (default: data/graphs of the repository)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; fail unless the files exist, are up to date and valid")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    status = 0
    for rel, build in GRAPHS.items():
        obj = build().to_json_obj()
        text = dumps_graph(obj)
        path = args.out / rel
        try:
            if json.loads(text) != obj:
                raise CheckError(f"{rel}: text does not round-trip")
            check_graph(obj)
            if rel.startswith("tiny/") and len(obj["operators"]) > TINY_MAX_OPS:
                raise CheckError(f"{rel}: {len(obj['operators'])} operators > {TINY_MAX_OPS}")
            size = len(text.encode())
            if size >= MAX_FILE_BYTES:
                raise CheckError(f"{rel}: {size} bytes >= {MAX_FILE_BYTES}")
            if args.check:
                if not path.exists():
                    raise CheckError(f"{path}: missing (run {Path(__file__).name})")
                disk = path.read_text()
                check_graph(json.loads(disk))
                if disk != text:
                    raise CheckError(f"{path}: out of date (run {Path(__file__).name})")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
        except CheckError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
            continue
        if not args.quiet:
            s = summary(obj)
            print(f"{'ok' if args.check else 'wrote'} {rel}: {s['operators']} operators, "
                  f"{s['tensors']} tensors, {s['parameter_bytes'] / 2**20:.1f} MiB parameters, "
                  f"{size} bytes")
    return status


if __name__ == "__main__":
    sys.exit(main())
