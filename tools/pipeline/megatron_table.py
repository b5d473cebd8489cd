#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Predicted against published TFLOP/s per GPU for Megatron-LM's pipelined
runs (Narayanan et al., SC'21, Table 1) on DGX-A100 clusters.

For each row: generates the GPT graph (`recsearch gen gpt`), evaluates the
published configuration pinned (`--algo megatron`: tensor parallel on the
8 GPUs of a node, data parallel over the nodes of a stage; `--stages PP`;
`--recompute full`)
and the search's own plan (`--stages auto`), and prints a markdown table of
step times and TFLOP/s per GPU = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) /
(step time · GPUs), with the search times. Extra search options (e.g. the
training settings of issue 14) go after `--`.

    tools/pipeline/megatron_table.py [--recsearch EXE] [--rows 39.1b,1t] [-- OPTIONS...]

Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTERS = os.path.join(ROOT, "data", "clusters")
SEQ, VOCAB = 2048, 51200

# name, hidden, layers, heads, TP, PP, GPUs, batch, published TFLOP/s per GPU
ROWS = [
    ("39.1b", 8192, 48, 64, 8, 2, 512, 1536, 138),
    ("145.6b", 12288, 80, 96, 8, 8, 1536, 2304, 148),
    ("1t", 25600, 128, 160, 8, 64, 3072, 3072, 163),
]


def find_exe(given):
    if given:
        return given
    for build in ("build", "build-release"):
        exe = os.path.join(ROOT, build, "tools", "recsearch", "recsearch")
        if os.path.exists(exe):
            return exe
    sys.exit("recsearch not found: build it or pass --recsearch")


def flops_per_step(b, h, l):
    return 96.0 * b * SEQ * l * h * h * (1 + SEQ / (6.0 * h) + VOCAB / (16.0 * l * h))


def search(exe, graph, cluster, extra, args):
    """Runs `recsearch search`; returns (summary dict or None, message, wall s)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = out.name
    cmd = [exe, "search", graph, "--cluster", cluster, "-o", path] + args + extra
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    try:
        if proc.returncode != 0:
            return None, proc.stderr.strip().splitlines()[-1], wall, cmd
        with open(path) as f:
            plan = json.load(f)
        return plan, "", wall, cmd
    finally:
        os.unlink(path)


def describe(plan):
    pipe = plan.get("pipeline")
    if not pipe:
        return "no stages"
    return "PP %d%s, m %d" % (pipe["device_groups"],
                              " x v %d" % pipe["virtual_stages"] if pipe["virtual_stages"] > 1
                              else "", pipe["microbatches"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recsearch")
    ap.add_argument("--rows", help="comma-separated row names (default: all)")
    ap.add_argument("extra", nargs="*", help="more `recsearch search` options (after --)")
    a = ap.parse_args()
    exe = find_exe(a.recsearch)
    rows = [r for r in ROWS if not a.rows or r[0] in a.rows.split(",")]
    print("| model | GPUs | batch | published | pinned TP8 PP (predicted) | step s | "
          "search: plan | step s | TFLOP/s | search s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    tmp = tempfile.mkdtemp()
    for name, h, l, heads, tp, pp, gpus, batch, published in rows:
        graph = os.path.join(tmp, "gpt-%s.json" % name)
        subprocess.run([exe, "gen", "gpt", "--hidden", str(h), "--layers", str(l), "--heads",
                        str(heads), "--seq", str(SEQ), "--vocab", str(VOCAB), "--batch",
                        str(batch), "-o", graph], check=True)
        cluster = os.path.join(CLUSTERS, "dgx_a100_%dx8.json" % (gpus // 8))
        flops = flops_per_step(batch, h, l)
        cells = [name, str(gpus), str(batch), str(published)]
        pinned, why, _, _ = search(exe, graph, cluster, a.extra,
                                   ["--algo", "megatron", "--stages", str(pp), "--recompute",
                                    "full", "-q"])
        if pinned:
            step = pinned["summary"]["step_time_s"]
            cells += ["%.0f (%s)" % (flops / (step * gpus) / 1e12, describe(pinned)),
                      "%.2f" % step]
        else:
            cells += ["no fit: " + why.replace("|", "/"), "-"]
        own, why, wall, _ = search(exe, graph, cluster, a.extra, ["--stages", "auto", "-q"])
        if own:
            step = own["summary"]["step_time_s"]
            cells += [describe(own), "%.2f" % step, "%.0f" % (flops / (step * gpus) / 1e12),
                      "%.2f" % wall]
        else:
            cells += ["no fit: " + why.replace("|", "/"), "-", "-", "%.2f" % wall]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
