#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Predicted against published: Megatron-LM's GPT runs without pipelining.

Narayanan et al. (SC'21, Table 1) trained GPT models on DGX-A100 nodes with
sequence 2048, vocabulary 51,200, mixed precision and full recomputation,
and report model TFLOP/s per GPU,

    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) / (step time · GPUs).

For each row this script generates the model (`recsearch gen gpt`), plans the
published configuration (tensor parallelism inside the node, data
parallelism outside, full recomputation) and lets the search find its own
plan on the same cluster and batch, and prints a markdown table of the
predicted TFLOP/s per GPU against the published figure, and the pinned
plan's predicted step time against the published one (the published step
time is the formula above solved for it).

`--attention megatron` generates the layout Megatron-LM of SC'21 ran (the s²
scores, one fused scale-mask-softmax, dropout); `explicit` (the default)
separates scale and mask, `flash` (or `--fused-attention`) fuses the whole
attention core.

    tools/zoo/megatron.py [--recsearch EXE] [--attention explicit|megatron|flash]
                          [--fused-attention] [--output FILE]

Standard library only. The cluster files are in data/clusters/.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality_report import find_exe  # noqa: E402

SEQ, VOCAB = 2048, 51200
# name, hidden, layers, heads, tensor-parallel size, GPUs, batch, published TFLOP/s per GPU,
# cluster file for the pinned plan (TP on the innermost level), cluster file for the search.
ROWS = [
    ("1.7B", 2304, 24, 24, 1, 32, 512, 137, "dgx_a100_4x8.json", "dgx_a100_4x8.json"),
    ("7.5B", 4096, 36, 32, 4, 128, 512, 142, "dgx_a100_16x2x4.json", "dgx_a100_16x8.json"),
]


def model_flops(b, s, l, h, v):
    return 96.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (16.0 * l * h))


def run(cmd):
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(" ".join(cmd) + ": " + out.stderr.strip())
    return out.stdout, time.monotonic() - t0


def plan_summary(exe, graph, cluster, extra):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        _, wall = run([exe, "search", graph, "--cluster", cluster, "-q", "-o", path] + extra)
        with open(path) as f:
            p = json.load(f)
    finally:
        os.unlink(path)
    return p["summary"], p.get("training", {}), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recsearch")
    ap.add_argument("--attention", choices=["explicit", "megatron", "flash"],
                    help="the attention layout of `recsearch gen` (default explicit)")
    ap.add_argument("--fused-attention", action="store_true",
                    help="one fused Attention operator per layer (--attention flash)")
    ap.add_argument("--output")
    args = ap.parse_args()
    if args.fused_attention and args.attention not in (None, "flash"):
        ap.error("--fused-attention is --attention flash")
    attention = "flash" if args.fused_attention else args.attention
    exe = find_exe(args.recsearch)
    clusters = os.path.join(ROOT, "data", "clusters")
    lines = ["| model | TP | GPUs | batch | published TFLOP/s | pinned: predicted | pinned / published "
             "| pinned step s | published step s | step / published "
             "| search's plan | its setting | search s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, h, l, a, tp, gpus, b, published, pinned_cl, search_cl in ROWS:
            graph = os.path.join(tmp, name + ".json")
            gen = [exe, "gen", "gpt", "--hidden", str(h), "--layers", str(l), "--heads", str(a),
                   "--seq", str(SEQ), "--vocab", str(VOCAB), "--batch", str(b), "-q", "-o", graph]
            if attention:
                gen += ["--attention", attention]
            run(gen)
            flops = model_flops(b, SEQ, l, h, VOCAB)
            algo = "data-parallel" if tp == 1 else "megatron"
            pinned, _, _ = plan_summary(exe, graph, os.path.join(clusters, pinned_cl),
                                        ["--algo", algo, "--recompute", "full"])
            own, setting, wall = plan_summary(exe, graph, os.path.join(clusters, search_cl), [])
            tf_pinned = flops / (pinned["step_time_s"] * gpus) / 1e12
            tf_own = flops / (own["step_time_s"] * gpus) / 1e12
            published_s = flops / (published * 1e12 * gpus)
            lines.append(
                f"| {name} | {tp} | {gpus} | {b} | {published} | {tf_pinned:.0f} | "
                f"{tf_pinned / published:.2f} | {pinned['step_time_s']:.2f} | {published_s:.2f} | "
                f"{pinned['step_time_s'] / published_s:.2f} | {tf_own:.0f} | recompute "
                f"{setting.get('recompute')}, ZeRO {setting.get('zero_stage')}, "
                f"{setting.get('microbatches')} microbatches | {wall:.2f} |")
    text = "\n".join(lines) + "\n"
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
