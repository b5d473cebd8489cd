#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The scaling figure: predicted TFLOP/s per GPU against GPUs for the GPT
family of Narayanan et al. (SC'21, Table 1), on DGX-A100 clusters.

Each model of the table runs on its published GPU count and batch (the
smallest, 1.7B, also on 8 and 16 GPUs with the same 16 sequences per GPU,
so the figure starts at one node). For each point the script generates the
graph (`recsearch gen gpt`), writes the DGX-A100 cluster of that many nodes
(the levels of data/clusters/dgx_a100_64x8.json; for tensor parallelism
over fewer than 8 GPUs the node's GPUs in groups of TP, as
dgx_a100_16x2x4.json), and prices:

* the published configuration, pinned as Megatron-LM's
  examples/sc21/run_table_1.sh ran it (TP, PP, virtual stages, microbatch
  size, full recomputation): `--algo megatron` (data-parallel for TP 1),
  `--stages PPxV`, `--microbatches B/(DP·MBS)`, `--recompute full`;
* the search's own plan: `--stages auto`, every setting free.

TFLOP/s per GPU = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) / (step · GPUs), the
paper's formula. Writes an SVG line chart (no plotting library) and prints
the figures as a markdown table.

    tools/pipeline/scaling_plot.py [--recsearch EXE] [-o docs/pipeline_scaling.svg]
                                   [--rows 1.7b,39.1b]
                                   [--attention explicit|megatron|flash] [--fused-attention]

`--attention` picks the layout `recsearch gen` writes, as in the Megatron
table (megatron_table.py); `--fused-attention` is `--attention flash`.

Standard library only.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

# The model constants, the TFLOP formula and the binary lookup are the
# Megatron table's (this directory is on sys.path when run as a script).
from megatron_table import ROOT, SEQ, VOCAB, find_exe, flops_per_step  # noqa: E402

# name, hidden, layers, heads, TP, PP, V, microbatch size, GPUs, batch,
# published TFLOP/s per GPU (None: not a published run). TP, PP, V and the
# microbatch size are those of Megatron-LM's examples/sc21/run_table_1.sh.
ROWS = [
    ("1.7b", 2304, 24, 24, 1, 1, 1, 16, 8, 128, None),
    ("1.7b", 2304, 24, 24, 1, 1, 1, 16, 16, 256, None),
    ("1.7b", 2304, 24, 24, 1, 1, 1, 16, 32, 512, 137),
    ("3.6b", 3072, 30, 32, 2, 1, 1, 16, 64, 512, 138),
    ("7.5b", 4096, 36, 32, 4, 1, 1, 16, 128, 512, 142),
    ("18.4b", 6144, 40, 48, 8, 1, 1, 8, 256, 1024, 135),
    ("39.1b", 8192, 48, 64, 8, 2, 1, 4, 512, 1536, 138),
    ("76.1b", 10240, 60, 80, 8, 4, 3, 2, 1024, 1792, 140),
    ("145.6b", 12288, 80, 96, 8, 8, 2, 2, 1536, 2304, 148),
    ("310.1b", 16384, 96, 128, 8, 16, 2, 1, 1920, 2160, 155),
    ("529.6b", 20480, 105, 128, 8, 35, 1, 1, 2520, 2520, 163),
    ("1t", 25600, 128, 160, 8, 64, 1, 1, 3072, 3072, 163),
]


def write_cluster(path, nodes, tp):
    """DGX-A100 nodes; for TP < 8 the node's GPUs in groups of TP (the
    innermost level is where --algo megatron puts tensor parallelism)."""
    inner = [{"name": "gpu", "size": 8, "bandwidth_GBps": 300, "latency_us": 2}]
    if 1 < tp < 8:
        inner = [{"name": "group", "size": 8 // tp, "bandwidth_GBps": 300, "latency_us": 2},
                 {"name": "gpu", "size": tp, "bandwidth_GBps": 300, "latency_us": 2}]
    cluster = {"format": "recsearch.cluster", "version": 1, "name": "%d x DGX-A100" % nodes,
               "levels": [{"name": "node", "size": nodes, "bandwidth_GBps": 25,
                           "latency_us": 5}] + inner,
               "device": {"peak_TFLOPs": 312, "memory_GiB": 80, "memory_bandwidth_GBps": 2039}}
    with open(path, "w") as f:
        json.dump(cluster, f)


def step_time(exe, graph, cluster, args):
    """`recsearch search`'s predicted step time, or None with the reason."""
    out = graph + ".plan.json"
    proc = subprocess.run([exe, "search", graph, "--cluster", cluster, "-q", "-o", out] + args,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    with open(out) as f:
        plan = json.load(f)
    os.unlink(out)
    return plan["summary"]["step_time_s"], ""


def pinned_args(tp, pp, v, mbs, gpus, batch):
    dp = gpus // (tp * pp)
    args = ["--algo", "data-parallel" if tp == 1 else "megatron", "--recompute", "full",
            "--microbatches", str(max(1, batch // (dp * mbs)))]
    if pp > 1:
        args += ["--stages", "%dx%d" % (pp, v)]
    return args


def svg(points, path):
    """A line chart: x = GPUs (log 2), y = TFLOP/s per GPU."""
    w, h, left, right, top, bottom = 800, 440, 70, 240, 40, 60
    x0, x1 = math.log2(8), math.log2(4096)
    ymax = 250.0

    def px(g):
        return left + (math.log2(g) - x0) / (x1 - x0) * (w - left - right)

    def py(t):
        return h - bottom - t / ymax * (h - top - bottom)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">GPT family on DGX-A100 (Narayanan et al., '
           'SC\'21, Table 1): TFLOP/s per GPU</text>' % left]
    for t in range(0, int(ymax) + 1, 50):
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' %
                   (left, py(t), w - right, py(t)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (left - 6, py(t) + 4, t))
    for e in range(3, 13):
        g = 2 ** e
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>' %
                   (px(g), top, px(g), h - bottom))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' %
                   (px(g), h - bottom + 16, g))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' %
               (left, h - bottom, w - right, h - bottom))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' %
               (left, top, left, h - bottom))
    out.append('<text x="%d" y="%d" text-anchor="middle">GPUs</text>' %
               ((left + w - right) // 2, h - 18))
    out.append('<text x="18" y="%d" transform="rotate(-90 18 %d)" text-anchor="middle">'
               'TFLOP/s per GPU</text>' % ((top + h - bottom) // 2, (top + h - bottom) // 2))
    series = [("published", "#222", "published"), ("pinned", "#d62728", "predicted, published "
                                                   "configuration"),
              ("searched", "#1f77b4", "predicted, searched plan")]
    for i, (key, color, label) in enumerate(series):
        pts = [(g, p[key]) for g, p in points if p.get(key)]
        if len(pts) > 1:
            out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' %
                       (color, " ".join("%.1f,%.1f" % (px(g), py(t)) for g, t in pts)))
        for g, t in pts:
            out.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>' % (px(g), py(t), color))
        ly = top + 10 + 20 * i
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>' %
                   (w - right + 10, ly, w - right + 30, ly, color))
        out.append('<text x="%d" y="%d" font-size="11">%s</text>' %
                   (w - right + 34, ly + 4, label))
    # Model names above the axis, on two rows (the largest runs are close
    # on a log scale).
    named = [(g, p["name"]) for g, p in points if p.get("published")]
    for i, (g, name) in enumerate(named):
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#555">%s'
                   '</text>' % (px(g), h - bottom - 6 - 12 * (i % 2), name))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recsearch")
    ap.add_argument("-o", "--output", default=os.path.join(ROOT, "docs", "pipeline_scaling.svg"))
    ap.add_argument("--rows", help="comma-separated model names (default: all)")
    ap.add_argument("--attention", choices=["explicit", "megatron", "flash"],
                    help="the attention layout of `recsearch gen` (default explicit)")
    ap.add_argument("--fused-attention", action="store_true",
                    help="graphs with one fused Attention operator per layer (--attention flash)")
    a = ap.parse_args()
    if a.fused_attention and a.attention not in (None, "flash"):
        ap.error("--fused-attention is --attention flash")
    attention = "flash" if a.fused_attention else a.attention
    exe = find_exe(a.recsearch)
    tmp = tempfile.mkdtemp()
    points = []
    print("| model | GPUs | batch | published | predicted, pinned | predicted, searched |")
    print("|---|---|---|---|---|---|")
    for name, hid, layers, heads, tp, pp, v, mbs, gpus, batch, published in ROWS:
        if a.rows and name not in a.rows.split(","):
            continue
        graph = os.path.join(tmp, "gpt-%s-%d.json" % (name, gpus))
        subprocess.run([exe, "gen", "gpt", "--hidden", str(hid), "--layers", str(layers),
                        "--heads", str(heads), "--seq", str(SEQ), "--vocab", str(VOCAB),
                        "--batch", str(batch), "-o", graph] +
                       (["--attention", attention] if attention else []), check=True)
        pinned_cluster = os.path.join(tmp, "pinned-%d-%d.json" % (gpus, tp))
        write_cluster(pinned_cluster, gpus // 8, tp)
        cluster = os.path.join(tmp, "dgx-%d.json" % gpus)
        write_cluster(cluster, gpus // 8, 8)
        flops = flops_per_step(batch, hid, layers)
        rate = lambda step: flops / (step * gpus) / 1e12 if step else None
        pinned, why_p = step_time(exe, graph, pinned_cluster,
                                  pinned_args(tp, pp, v, mbs, gpus, batch))
        searched, why_s = step_time(exe, graph, cluster, ["--stages", "auto"])
        p = {"name": name, "published": published, "pinned": rate(pinned),
             "searched": rate(searched)}
        points.append((gpus, p))
        cell = lambda r, why: "%.0f" % r if r else "no fit: " + why.replace("|", "/")
        print("| %s | %d | %d | %s | %s | %s |" %
              (name, gpus, batch, published or "-", cell(p["pinned"], why_p),
               cell(p["searched"], why_s)), flush=True)
    svg(points, a.output)
    print("\nwrote " + a.output)


if __name__ == "__main__":
    main()
