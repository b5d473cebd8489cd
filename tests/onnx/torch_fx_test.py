#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The torch.fx front end (tools/python/recsearch/torch.py) against the ONNX
route, on a torchvision ResNet-50, an nn.TransformerEncoder, an
nn.TransformerDecoder (cross-attention), the small GPT of
torch_export_test.py (nn.Embedding, nn.MultiheadAttention, nn.Linear), and
torchvision's densenet121, vit_b_16 (64x64) and small Swin (112x112) as
that test builds them.

Run by meson as `torch_fx_test.py RECSEARCH_EXE` with Debian's
/usr/bin/python3, PYTHONPATH including tools/python and RECSEARCH_LIBRARY
naming the C library; exits 77 (skipped) only when torch or torchvision is
missing. Models have random weights (weights=None).

For each model, in eval mode:
  * recsearch.torch.trace builds a graph the library accepts, whose
    operators are named by module ("layer1.0.conv1") and whose parameters
    are the module's FQNs; its parameter count equals the ONNX route's
    (both fold eval-mode BatchNorm2d into the preceding Conv2d);
  * recsearch.torch.plan answers for every parameter FQN of the module with
    one DTensor placement per named mesh dim;
  * its step time is within 5% of the plan searched on the graph
    `recsearch import` makes of torch.onnx.export's file (opset 17), for
    training and for inference.
The GPT computes its positions and causal mask from the input's size
(torch.arange(idx.shape[1])), which plain torch.fx cannot trace; its graph
must also pass `recsearch validate` with no warning (no operator replicated
for lack of a mapping) and hold exactly torch's parameters (count and
bytes), and its variants (a mask held in a buffer and sliced, a float mask
from nn.Transformer.generate_square_subsequent_mask, one from
torch.triu/masked_fill with positions sliced from the embedding table)
give the same graph.
Modules torch.fx cannot trace, and torch.nn modules with no lowering, raise
UntraceableError naming the module and the ONNX route.
"""

import json
import os
import subprocess
import sys
import tempfile
import warnings

try:
    import torch
    import torch.nn as nn
    import torchvision
except ImportError as e:  # the only reason to skip
    print("skipped: %s" % e)
    sys.exit(77)

import recsearch
import recsearch.torch as rt
# The models and the norm count of the ONNX import test.
from torch_export_test import GPT, densenet121, folded_norm_channels, small_swin, vit_b_16

EXE = sys.argv[1]
FAILURES = []
MESH = {"dp": 4, "tp": 2}


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return bool(cond)


def onnx_route(tmp, name, module, example, mode, fold=True):
    path = os.path.join(tmp, name + ".onnx")
    gpath = os.path.join(tmp, name + ".json")
    if not os.path.exists(gpath):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, example, path, opset_version=17, input_names=["x"],
                              do_constant_folding=fold)
        subprocess.run([EXE, "import", path, "-q", "-o", gpath], check=True)
    g = recsearch.Graph.read_file(gpath)
    return recsearch.search(g, recsearch.Cluster.mesh(list(MESH.values())), mode=mode)


def param_count(graph):
    return param_count_bytes(graph)[0]


def check_model(tmp, name, module, example, fold=True):
    module.eval()
    graph = rt.trace(module, example)
    recsearch.Graph.from_json(json.dumps(graph)).validate()
    onnx_json = os.path.join(tmp, name + ".json")
    for mode in ("train", "infer"):
        p = rt.plan(module, example, mesh=MESH, mode=mode)
        q = onnx_route(tmp, name, module, example, mode, fold)
        a, b = p.step_time_s, q.summary["step_time_s"]
        check(abs(a - b) <= 0.05 * b,
              "%s %s: fx route step %.4g s, ONNX route %.4g s (more than 5%% apart)"
              % (name, mode, a, b))
        print("%-20s %-5s fx %.4g s, onnx %.4g s (%d vs %d operators)"
              % (name, mode, a, b, len(graph["operators"]), len(q.operators)), flush=True)
    with open(onnx_json) as f:
        onnx_graph = json.load(f)
    check(param_count(graph) == param_count(onnx_graph),
          "%s: fx graph has %d parameters, ONNX route %d"
          % (name, param_count(graph), param_count(onnx_graph)))
    placements = p.placements()
    fqns = {n for n, _ in module.named_parameters()}
    check(fqns <= set(placements), "%s: no placement for %s" % (name, sorted(fqns - set(placements))[:5]))
    for fqn, pl in placements.items():
        ok = len(pl) == len(MESH) and all(
            isinstance(x, (rt.Shard, rt.Replicate, rt.Partial, rt.Mixed)) for x in pl)
        if not check(ok, "%s: placement of %s: %r" % (name, fqn, pl)):
            break
    return graph, placements


class Gate(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
            return x * 2
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gate = Gate()

    def forward(self, x):
        return self.gate(self.fc(x))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8)

    def forward(self, x):
        return self.rnn(x)[0]


def check_untraceable():
    for module, path, kind in ((Net(), "gate", "Gate"), (Recurrent(), "rnn", "LSTM")):
        try:
            rt.trace(module, torch.randn(3, 2, 8))
            check(False, "%s traced" % kind)
        except rt.UntraceableError as e:
            msg = str(e)
            check(e.module_path == path and kind in msg and "torch.onnx.export" in msg
                  and "recsearch import" in msg, "untraceable %s: %s" % (kind, msg))


def check_data_parallel(enc, example):
    """True data parallelism on a sequence-first nn.TransformerEncoder
    ([seq, batch, embed]): `--algo data-parallel` follows the batch (dim 1
    here) through the reshapes and transposes of the attention, so that
    inference moves no activation at all and training only synchronises
    gradients; every MatMul and the softmax are cut on every mesh axis."""
    enc.eval()
    for mode in ("infer", "train"):
        p = rt.plan(enc, (example,), mesh=MESH, mode=mode, algorithm="data-parallel").plan
        reds = p.redistributions()
        kinds = sorted({(r["reason"], r["collective"]) for r in reds})
        check(not any(r["collective"] == "all_to_all" for r in reds),
              "data-parallel %s: all-to-alls %s" % (mode, kinds))
        want = set() if mode == "infer" else {"gradient"}
        check({r["reason"] for r in reds} <= want,
              "data-parallel %s: redistributions other than gradient sync: %s" % (mode, kinds))
        plan = json.loads(p.to_json())
        uncut = [o["name"] for o in plan["operators"]
                 if (o["type"] in ("MatMul", "Softmax") and
                     any(d is None for d in o["cuts"].values()))]
        check(not uncut, "data-parallel %s leaves %s uncut" % (mode, uncut[:5]))
        print("data-parallel %-5s: %d redistributions (%s), step %.4g s"
              % (mode, len(reds), kinds, p.summary["step_time_s"]), flush=True)


def check_cross_attention(tmp):
    """nn.TransformerDecoder: self-attention on the target, cross-attention
    from the target (query) to the encoder's memory (key and value), whose
    sequences differ; torch.fx traces the decoder layers themselves, with
    nn.MultiheadAttention as the lowered leaf."""
    layer = nn.TransformerDecoderLayer(256, 4, 1024)
    dec = nn.TransformerDecoder(layer, 2)
    t, s, b = 16, 40, 8
    graph, placements = check_model(tmp, "transformer_decoder", dec,
                                    (torch.randn(t, b, 256), torch.randn(s, b, 256)))
    check(set(placements) == {n for n, _ in dec.named_parameters()},
          "decoder placements name exactly its parameters")
    shapes = {x["name"]: x["shape"] for x in graph["tensors"]}
    ops = {o["name"]: o for o in graph["operators"]}
    cross = "layers.1.multihead_attn"
    for name in (cross + ".q_proj.matmul", cross + ".kv_proj.matmul", cross + ".scores",
                 "layers.1.self_attn.scores"):
        check(name in ops, "decoder operator %s missing: %s" % (name, sorted(ops)[:8]))
    if cross + ".scores" in ops and "layers.1.self_attn.scores" in ops:
        check(shapes[ops[cross + ".scores"]["outputs"][0]] == [b * 4, t, s],
              "cross-attention scores are [b*h, t, s]")
        check(shapes[ops["layers.1.self_attn.scores"]["outputs"][0]] == [b * 4, t, t],
              "self-attention scores are [b*h, t, t]")
    # Batch-first, with key and value of their own widths (kdim, vdim).
    mha = nn.MultiheadAttention(64, 4, batch_first=True, kdim=32, vdim=48)

    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = mha

        def forward(self, q, k, v):
            return self.attn(q, k, v)[0]

    g = rt.trace(Attend().eval(), (torch.randn(2, 5, 64), torch.randn(2, 7, 32),
                                   torch.randn(2, 7, 48)))
    recsearch.Graph.from_json(json.dumps(g)).validate()
    names = {o["name"] for o in g["operators"]}
    check({"attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.scores"} <= names,
          "separate q/k/v projections: %s" % sorted(names))


class GPTBufferMask(GPT):
    """The causal mask registered as a bool buffer and sliced to the input's
    length; positions from torch.arange(0, x.size(1), dtype=...)."""

    def __init__(self):
        super().__init__()
        seq = self.pos.num_embeddings
        self.register_buffer("causal", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, idx):
        t = idx.size(1)
        i = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.tok(idx) + self.pos(i)
        for b in self.blocks:
            x = b(x, self.causal[:t, :t])
        return self.head(self.ln(x))


class GPTFloatMask(GPT):
    """nn.Transformer's float mask (-inf above the diagonal), built in forward."""

    def forward(self, idx):
        t = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


class GPTFilledMask(GPT):
    """A float mask from torch.triu and masked_fill; positions are the first
    rows of a longer embedding table, sliced (a Slice of the parameter)."""

    def __init__(self):
        super().__init__(seq=64)

    def forward(self, idx):
        _, t = idx.shape
        upper = torch.triu(torch.ones(t, t, device=idx.device), diagonal=1) == 1
        mask = torch.zeros(t, t, device=idx.device).masked_fill(upper, float("-inf"))
        x = self.tok(idx) + self.pos.weight[:t]
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def param_count_bytes(graph):
    sizes = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8}
    n = nbytes = 0
    for t in graph["tensors"]:
        if t.get("kind") == "parameter":
            c = 1
            for d in t["shape"]:
                c *= d
            n += c
            nbytes += c * sizes[t["dtype"]]
    return n, nbytes


def check_zoo(tmp):
    """densenet121 (its pads, concats and F.adaptive_avg_pool2d), vit_b_16
    at 64x64 (the class token's expand, and `x, _ = self_attention(...)`,
    which unpacks a leaf's tuple) and the small Swin at 112x112, as
    torch_export_test.py builds them, through both routes (check_model),
    each with exactly torch's parameters (count and bytes; DenseNet less the
    channels of the norms folded into a convolution, as both routes fold
    them). The Swin is exported as that test does, without constant folding
    (which would store each block's relative-position bias already
    gathered); check_swin compares its two graphs."""
    for name, build, has_bn, size, fold in (
            ("densenet121", densenet121, True, 64, True), ("vit_b_16", vit_b_16, False, 64, True),
            ("swin_2x2", small_swin, False, 112, False)):
        torch.manual_seed(0)
        module = build()
        graph, _ = check_model(tmp, name, module, torch.randn(8, 3, size, size), fold)
        want = sum(p.numel() for p in module.parameters())
        if has_bn:
            want -= folded_norm_channels(module)
        got, got_bytes = param_count_bytes(graph)
        check(got == want and got_bytes == 4 * want,
              "%s: fx graph has %d parameters (%d bytes), torch %d" % (name, got, got_bytes, want))
        if name == "swin_2x2":
            check_swin(tmp, module, graph)


def check_swin(tmp, module, graph):
    """torchvision marks Swin's shifted_window_attention,
    _get_relative_position_bias, _patch_merging_pad and stochastic_depth with
    torch.fx.wrap; the fx route traces through them, so that its graph has
    the ONNX route's operators kind by kind (the window attention's
    projections, matmuls and softmax, the cyclic shifts as Slice and Concat,
    the shifted-window mask as a constant, the relative-position bias as a
    Gather of its table), none opaque. The one difference: the exporter
    writes each strided 2-D slice of patch merging as one Slice per axis (6
    for 4)."""
    with open(os.path.join(tmp, "swin_2x2.json")) as f:
        onnx_graph = json.load(f)
    fx_kinds, onnx_kinds = ({} for _ in range(2))
    for g, kinds in ((graph, fx_kinds), (onnx_graph, onnx_kinds)):
        for o in g["operators"]:
            kinds[o["type"]] = kinds.get(o["type"], 0) + 1
    slices = fx_kinds.pop("Slice", 0), onnx_kinds.pop("Slice", 0)
    check(fx_kinds == onnx_kinds and slices == (20, 22),
          "swin: fx operators %s (%d slices), ONNX %s (%d)"
          % (fx_kinds, slices[0], onnx_kinds, slices[1]))
    blocks = [n for n, m in module.named_modules() if type(m).__name__ == "ShiftedWindowAttention"]
    ops = {o["name"]: o for o in graph["operators"]}
    kinds = {t["name"]: t.get("kind") for t in graph["tensors"]}
    for b in blocks:
        bias = [o for o in graph["operators"]
                if o["inputs"][:1] == [b + ".relative_position_bias_table"]]
        check(len(bias) == 1 and bias[0]["type"] == "Gather" and
              kinds.get(bias[0]["inputs"][1]) == "constant",
              "swin %s: the bias table feeds %s" % (b, bias))
        check(any(n.startswith(b + ".") and o["type"] == "Softmax" for n, o in ops.items()),
              "swin %s: no softmax" % b)
    shifted = [o for o in graph["operators"] if o["type"] == "Add" and
               any(kinds.get(i) == "constant" and "const" in i for i in o["inputs"])]
    check(len(shifted) == 2, "swin: %d shifted-window mask adds, want 2" % len(shifted))


def check_gpt(tmp):
    """The GPT through both routes on 8 devices (check_model: train and
    infer step times within 5%), validated by the CLI with no warning, with
    torch's parameters; its mask and position variants give the same graph
    (operator types and parameters), and no route leaves fx's lifted
    constants on the user's module."""
    torch.manual_seed(0)
    gpt = GPT()
    example = torch.randint(0, 1000, (32, 32))
    graph, placements = check_model(tmp, "gpt", gpt, example)
    path = os.path.join(tmp, "gpt_fx.json")
    with open(path, "w") as f:
        json.dump(graph, f)
    v = subprocess.run([EXE, "validate", path], capture_output=True, text=True)
    check(v.returncode == 0 and v.stderr == "",
          "gpt: recsearch validate of the fx graph: %s %s" % (v.stdout, v.stderr))
    want = sum(p.numel() for p in gpt.parameters())
    got, got_bytes = param_count_bytes(graph)
    check(got == want and got_bytes == 4 * want,
          "gpt: fx graph has %d parameters (%d bytes), torch %d" % (got, got_bytes, want))
    check(set(placements) == {n for n, _ in gpt.named_parameters()},
          "gpt placements name exactly its parameters")
    names = {o["name"] for o in graph["operators"]}
    check({"tok", "blocks.1.attn.softmax", "blocks.1.fc1.matmul", "head"} <= names,
          "gpt operator names: %s" % sorted(names)[:8])
    kinds = sorted(o["type"] for o in graph["operators"])
    # Positions 0..31 of a 32-row table are the table: the parameter itself
    # is added (as the exporter folds it), no gathered copy.
    adds = [o for o in graph["operators"] if "pos.weight" in o["inputs"]]
    check(len(adds) == 1 and adds[0]["type"] == "Add" and "pos" not in names,
          "gpt: pos.weight feeds %s" % adds)
    for cls in (GPTBufferMask, GPTFloatMask, GPTFilledMask):
        torch.manual_seed(0)
        m = cls().eval()
        g = rt.trace(m, example)
        recsearch.Graph.from_json(json.dumps(g)).validate()
        other = sorted(o["type"] for o in g["operators"])
        ops = {o["name"]: o for o in g["operators"]}
        if cls is GPTFilledMask:  # rows 0:32 of its 64, where the others add the table
            sl = [o for o in g["operators"] if o["inputs"] == ["pos.weight"]]
            check(len(sl) == 1 and sl[0]["type"] == "Slice" and sl[0].get("attrs", {}) ==
                  {"starts": [0], "ends": [32], "axes": [0]}, "%s: %s" % (cls.__name__, sl))
            other.remove("Slice")
        check(other == kinds, "%s: operators %s, GPT's %s"
              % (cls.__name__, _diff(other, kinds), _diff(kinds, other)))
        n = sum(p.numel() for p in m.parameters())
        check(param_count_bytes(g) == (n, 4 * n), "%s: parameters %s, torch %d"
              % (cls.__name__, param_count_bytes(g), n))
        masks = [t for t in g["tensors"] if t.get("kind") == "constant" and t["shape"] == [32, 32]]
        check(len(masks) == len(m.blocks) and
              all(ops.get("blocks.%d.attn.mask" % i, {}).get("inputs", [None, None])[1] in
                  {t["name"] for t in masks} for i in range(len(m.blocks))),
              "%s: each block adds a [32, 32] constant mask: %s" % (cls.__name__, masks))
        left = [k for k in vars(m) if k.startswith("_tensor_constant")]
        check(not left, "%s: trace left %s on the module" % (cls.__name__, left))
        print("%-20s traced: %d operators" % (cls.__name__, len(g["operators"])), flush=True)


def _diff(a, b):
    rest = list(b)
    out = []
    for x in a:
        if x in rest:
            rest.remove(x)
        else:
            out.append(x)
    return out


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="recsearch-fx-") as tmp:
        resnet = torchvision.models.resnet50(weights=None)
        graph, placements = check_model(tmp, "resnet50", resnet, torch.randn(8, 3, 64, 64))
        names = {o["name"] for o in graph["operators"]}
        check("layer1.0.conv1" in names and "fc.matmul" in names and "fc" in names,
              "resnet50 operator names: %s" % sorted(names)[:8])
        # A folded norm's weight is placed as the conv bias that holds it.
        check(placements["layer1.0.bn1.weight"] == placements["layer1.0.bn1.bias"],
              "folded batch norm placements")
        layer = nn.TransformerEncoderLayer(256, 4, 1024)
        enc = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        graph, placements = check_model(tmp, "transformer_encoder", enc, torch.randn(32, 8, 256))
        check(set(placements) == {n for n, _ in enc.named_parameters()},
              "encoder placements name exactly its parameters")
        names = {o["name"] for o in graph["operators"]}
        check("layers.3.linear1.matmul" in names and "layers.0.self_attn.softmax" in names,
              "encoder operator names: %s" % sorted(names)[:8])
        check_data_parallel(enc, torch.randn(32, 8, 256))
        check_cross_attention(tmp)
        check_gpt(tmp)
        check_zoo(tmp)
    check_untraceable()
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
