#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The torch.fx front end (tools/python/recsearch/torch.py) against the ONNX
route, on a torchvision ResNet-50, an nn.TransformerEncoder and an
nn.TransformerDecoder (cross-attention).

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

EXE = sys.argv[1]
FAILURES = []
MESH = {"dp": 4, "tp": 2}


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return bool(cond)


def onnx_route(tmp, name, module, example, mode):
    path = os.path.join(tmp, name + ".onnx")
    gpath = os.path.join(tmp, name + ".json")
    if not os.path.exists(gpath):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, example, path, opset_version=17, input_names=["x"])
        subprocess.run([EXE, "import", path, "-q", "-o", gpath], check=True)
    g = recsearch.Graph.read_file(gpath)
    return recsearch.search(g, recsearch.Cluster.mesh(list(MESH.values())), mode=mode)


def param_count(graph):
    n = 0
    for t in graph["tensors"]:
        if t.get("kind") == "parameter":
            c = 1
            for d in t["shape"]:
                c *= d
            n += c
    return n


def check_model(tmp, name, module, example):
    module.eval()
    graph = rt.trace(module, example)
    recsearch.Graph.from_json(json.dumps(graph)).validate()
    onnx_json = os.path.join(tmp, name + ".json")
    for mode in ("train", "infer"):
        p = rt.plan(module, example, mesh=MESH, mode=mode)
        q = onnx_route(tmp, name, module, example, mode)
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
                     any(c["dim"] is None for c in o["cuts"]))]
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
    check_untraceable()
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
