#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`recsearch import` on what torch.onnx.export writes for real models.

Run by meson as `torch_export_test.py RECSEARCH_EXE` with Debian's
/usr/bin/python3; exits 77 (skipped) only when torch or torchvision is
missing. Every model is built here with random weights (weights=None, never
downloaded) and exported with torch.onnx.export:

  resnet50, densenet121     opset 13, 64x64 images (the size changes no weight)
  vit_b_16                  opset 17, 64x64 images, dynamic batch (expand(n, -1, -1))
  nn.TransformerEncoder     24 layers, opset 13, dynamic batch (cloned layers:
                            every layer's weights reach the graph through
                            Identity copies; 24-deep shape folding)
  a small GPT               nn.Embedding, nn.MultiheadAttention, nn.Linear;
                            opsets 13 and 17, dynamic batch
  a small Swin              torchvision's SwinTransformer (swin_b's code and
                            operators: shifted windows and their masks, the
                            relative position bias, F.pad, patch merging)
                            with 2 + 2 blocks of width 32, opset 17, a fixed
                            batch of 1 at 112x112 (windows divide every stage,
                            as at 224), do_constant_folding=False

Each must import, pass `recsearch validate`, import nothing replicated for
lack of a mapping (no warning at all), and have exactly the parameters of
the torch module: count and bytes equal to sum(p.numel()) (float32: 4 bytes
each). The GPT's F.gelu, which these opsets export as
x * 0.5 * (1 + erf(x / sqrt 2)), imports as one GeLU per block (as torch
runs it), and the Mul by 1 of its attention's baddbmm is dropped (checked at
opset 17, where LayerNorm is one node and no other Mul remains).

How batch norm is counted: in eval mode torch.onnx.export folds a
BatchNorm2d that directly follows a Conv2d into that convolution, whose
weight absorbs the scale and whose new bias is the norm's shift. Such a
norm's weight and bias (2 x C values) become one bias of C values, so the
expected count is sum(p.numel()) minus C for every folded norm (found with
torch.fx: a BatchNorm2d whose input is a Conv2d read by nothing else).
Running statistics are buffers, not parameters, in torch and constants in
the graph; a norm that is not folded (DenseNet's norm1 after a concat)
keeps its weight and bias as parameters.

Why Swin is small here: torch 1.13's exporter spends about 2.5 ms per ONNX
node on per-node shape inference, and converts each in-place slice
assignment of the shifted-window mask (9 per shifted block) from a
sub-block at about 0.4 s each; swin_b's 24 blocks take minutes to export
(the import itself takes about a second). The small model exports the same
operators from the same code in a fraction of that. Its constants are not
folded so that the relative position bias stays a gather from its table,
the parameter torch counts (constant folding stores each block's bias
already gathered, [1, heads, 49, 49] instead of [169, heads]).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

try:
    import torch
    import torch.nn as nn
    import torchvision
    from torchvision.models.swin_transformer import SwinTransformer
except ImportError as e:  # the only reason to skip
    print("skipped: %s" % e)
    sys.exit(77)

EXE = sys.argv[1]
FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return bool(cond)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    """A small decoder: token and position embeddings, causal blocks, a head.
    The causal mask is computed from the input, not held in a float buffer
    (an exporter cannot tell a float buffer from a parameter)."""

    def __init__(self, vocab=1000, d=128, heads=4, layers=2, seq=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        i = torch.arange(idx.shape[1], device=idx.device)
        mask = i[None, :] > i[:, None]
        x = self.tok(idx) + self.pos(i)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def folded_norm_channels(module):
    """Channels of the BatchNorm2d modules torch.onnx folds into a Conv2d."""
    gm = torch.fx.symbolic_trace(module)
    mods = dict(gm.named_modules())
    total = 0
    for n in gm.graph.nodes:
        if n.op != "call_module" or not isinstance(mods[n.target], nn.BatchNorm2d):
            continue
        src = n.args[0]
        if (isinstance(src, torch.fx.Node) and src.op == "call_module"
                and isinstance(mods[src.target], nn.Conv2d) and len(src.users) == 1):
            total += mods[n.target].num_features
    return total


def densenet121():
    return torchvision.models.densenet121(weights=None)


def vit_b_16():
    """ViT-B/16 for 64x64 images (the size changes only the position table)."""
    return torchvision.models.vit_b_16(weights=None, image_size=64)


def small_swin():
    """swin_b's code with 2 + 2 blocks of width 32 (see above); 112x112 images."""
    return SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                           window_size=[7, 7])


def models():
    torch.manual_seed(0)
    yield ("resnet50", torchvision.models.resnet50(weights=None), torch.randn(1, 3, 64, 64),
           13, None, True)
    yield ("densenet121", densenet121(), torch.randn(1, 3, 64, 64), 13, None, True)
    yield ("vit_b_16", vit_b_16(), torch.randn(1, 3, 64, 64), 17, {"x": {0: "batch"}}, False)
    layer = nn.TransformerEncoderLayer(256, 4, 1024)
    yield ("transformer_encoder24", nn.TransformerEncoder(layer, 24, enable_nested_tensor=False),
           torch.randn(16, 2, 256), 13, {"x": {1: "batch"}}, False)
    gpt = GPT()
    for opset in (13, 17):
        yield ("gpt_opset%d" % opset, gpt, torch.randint(0, 1000, (2, 32)), opset,
               {"x": {0: "batch"}}, False)
    yield ("swin_2x2", small_swin(), torch.randn(1, 3, 112, 112), 17, None, False, False)


def graph_params(graph):
    n = nbytes = 0
    sizes = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8}
    for t in graph["tensors"]:
        if t.get("kind") != "parameter":
            continue
        count = 1
        for d in t["shape"]:
            count *= d
        n += count
        nbytes += count * sizes[t["dtype"]]
    return n, nbytes


def run_one(tmp, name, module, example, opset, dynamic, has_bn, fold=True):
    module.eval()
    path = os.path.join(tmp, name + ".onnx")
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, path, opset_version=opset, input_names=["x"],
                          dynamic_axes=dynamic, do_constant_folding=fold)
    t1 = time.time()
    gpath = os.path.join(tmp, name + ".json")
    r = subprocess.run([EXE, "import", path, "--dim", "batch=8", "-o", gpath],
                       capture_output=True, text=True)
    if not check(r.returncode == 0, "%s: import failed: %s" % (name, r.stderr[-2000:])):
        return
    check(r.stderr == "", "%s: import warned (replicated or otherwise): %s" % (name, r.stderr[-3000:]))
    v = subprocess.run([EXE, "validate", gpath], capture_output=True, text=True)
    check(v.returncode == 0 and v.stderr == "", "%s: validate: %s %s" % (name, v.stdout, v.stderr))
    with open(gpath) as f:
        graph = json.load(f)
    want = sum(p.numel() for p in module.parameters())
    if has_bn:
        want -= folded_norm_channels(module)
    got, got_bytes = graph_params(graph)
    check(got == want, "%s: %d parameters imported, torch has %d" % (name, got, want))
    check(got_bytes == 4 * want, "%s: %d parameter bytes, expected %d" % (name, got_bytes, 4 * want))
    if name.startswith("gpt"):
        types = [o["type"] for o in graph["operators"]]
        # Opset 13 spells LayerNorm out too (its scale is a Mul); at 17 the
        # only Muls were the GELU's and the attention's Mul by 1.
        check(types.count("GeLU") == len(module.blocks) and "Erf" not in types
              and (opset < 17 or "Mul" not in types), "%s: erf GELU not fused, or a Mul left: %s"
              % (name, sorted(set(types))))
    print("%-22s opset %d: %4d operators, %10d parameters (export %.1fs, import %.1fs)"
          % (name, opset, len(graph["operators"]), got, t1 - t0, time.time() - t1), flush=True)


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="recsearch-torch-") as tmp:
        for m in models():
            run_one(tmp, *m)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
