#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Predicted against published TFLOP/s per GPU for Megatron-LM's pipelined
runs (Narayanan et al., SC'21, Table 1) on DGX-A100 clusters.

For each row: generates the GPT graph (`recsearch gen gpt`), evaluates the
published configuration pinned as Megatron-LM's own script for the table
ran it (examples/sc21/run_table_1.sh: tensor parallel on the 8 GPUs of a
node, data parallel over the nodes of a stage, `PP` stages with `V`
virtual stages each, microbatches of `MBS` sequences, full recomputation:
`--algo megatron --stages PPxV --microbatches B/(DP·MBS) --recompute full`)
and the search's own plan (`--stages auto`), and prints a markdown table of
step times and TFLOP/s per GPU = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) /
(step time · GPUs), with the search times; then, with --breakdown, where
the pinned plan's step goes (the slowest group's compute, recomputation,
exposed collectives, point-to-point sends, bubble and what it pays once
per step). Extra search options go after `--`. The published step time is
the formula solved for it; the issue's target is the pinned step within 25%
of it.

`--attention megatron` generates the layout Megatron-LM of SC'21 ran (the s²
scores, one fused scale-mask-softmax, dropout); `explicit` (the default)
separates scale and mask, `flash` (or `--fused-attention`) fuses the whole
attention core.

    tools/pipeline/megatron_table.py [--recsearch EXE] [--rows 39.1b,1t]
                                     [--attention explicit|megatron|flash] [--fused-attention]
                                     [--pinned-only] [--breakdown] [-- OPTIONS...]

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

# name, hidden, layers, heads, TP, PP, virtual stages, microbatch size, GPUs,
# batch, published TFLOP/s per GPU. PP, V and the microbatch size are those
# of Megatron-LM's examples/sc21/run_table_1.sh (145B: 5 layers per virtual
# stage of its 10 per stage, V = 2).
ROWS = [
    ("39.1b", 8192, 48, 64, 8, 2, 1, 4, 512, 1536, 138),
    ("145.6b", 12288, 80, 96, 8, 8, 2, 2, 1536, 2304, 148),
    ("1t", 25600, 128, 160, 8, 64, 1, 1, 3072, 3072, 163),
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


def breakdown(plan):
    """Where the pinned plan's step goes: the slowest group's figures (s)."""
    pipe = plan["pipeline"]
    m = pipe["microbatches"]
    figs = pipe["group_figures"]
    slow = max(range(len(figs)), key=lambda g: figs[g]["microbatch_s"] + figs[g]["send_s"])
    f = figs[slow]
    mine = [s["summary"] for s in pipe["stages"] if s["group"] == slow]
    compute = sum(s["compute_s"] for s in mine)
    recompute = sum(s.get("recompute_s", 0.0) for s in mine)
    exposed = sum(s.get("exposed_communication_s", 0.0) for s in mine)
    step = plan["summary"]["step_time_s"]
    # The group's busy time is m microbatches of compute, exposed collectives
    # (those each microbatch repeats) and sends; the stages' exposed figure
    # also holds what they pay once per step (per_step_s).
    return {"group": slow, "compute": compute - recompute, "recompute": recompute,
            "collectives": max(0.0, exposed - f["per_step_s"]), "p2p": m * f["send_s"],
            "bubble": f["bubble_s"], "per step": f["per_step_s"],
            "other": step - f["busy_s"] - f["bubble_s"] - f["per_step_s"], "step": step}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recsearch")
    ap.add_argument("--rows", help="comma-separated row names (default: all)")
    ap.add_argument("--attention", choices=["explicit", "megatron", "flash"],
                    help="the attention layout of `recsearch gen` (default explicit)")
    ap.add_argument("--fused-attention", action="store_true",
                    help="graphs with one fused Attention operator per layer (--attention flash)")
    ap.add_argument("--pinned-only", action="store_true", help="skip the searched plans")
    ap.add_argument("--breakdown", action="store_true",
                    help="then the pinned plans' step, part by part")
    ap.add_argument("extra", nargs="*", help="more `recsearch search` options (after --)")
    a = ap.parse_args()
    if a.fused_attention and a.attention not in (None, "flash"):
        ap.error("--fused-attention is --attention flash")
    attention = "flash" if a.fused_attention else a.attention
    exe = find_exe(a.recsearch)
    rows = [r for r in ROWS if not a.rows or r[0] in a.rows.split(",")]
    print("| model | GPUs | batch | published | pinned TP8 PP (predicted) | step s | "
          "published step s | step / published | search: plan | step s | TFLOP/s | search s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    tmp = tempfile.mkdtemp()
    parts = []
    for name, h, l, heads, tp, pp, v, mbs, gpus, batch, published in rows:
        graph = os.path.join(tmp, "gpt-%s.json" % name)
        subprocess.run([exe, "gen", "gpt", "--hidden", str(h), "--layers", str(l), "--heads",
                        str(heads), "--seq", str(SEQ), "--vocab", str(VOCAB), "--batch",
                        str(batch), "-o", graph] +
                       (["--attention", attention] if attention else []), check=True)
        microbatches = batch // (gpus // (tp * pp)) // mbs
        cluster = os.path.join(CLUSTERS, "dgx_a100_%dx8.json" % (gpus // 8))
        flops = flops_per_step(batch, h, l)
        cells = [name, str(gpus), str(batch), str(published)]
        published_s = flops / (published * 1e12 * gpus)
        pinned, why, _, _ = search(exe, graph, cluster, a.extra,
                                   ["--algo", "megatron", "--stages", "%dx%d" % (pp, v),
                                    "--microbatches", str(microbatches), "--recompute", "full",
                                    "-q"])
        if pinned:
            parts.append((name, breakdown(pinned)))
            step = pinned["summary"]["step_time_s"]
            cells += ["%.0f (%s)" % (flops / (step * gpus) / 1e12, describe(pinned)),
                      "%.2f" % step, "%.2f" % published_s, "%.2f" % (step / published_s)]
        else:
            cells += ["no fit: " + why.replace("|", "/"), "-", "%.2f" % published_s, "-"]
        if a.pinned_only:
            print("| " + " | ".join(cells) + " |", flush=True)
            continue
        own, why, wall, _ = search(exe, graph, cluster, a.extra, ["--stages", "auto", "-q"])
        if own:
            step = own["summary"]["step_time_s"]
            cells += [describe(own), "%.2f" % step, "%.0f" % (flops / (step * gpus) / 1e12),
                      "%.2f" % wall]
        else:
            cells += ["no fit: " + why.replace("|", "/"), "-", "-", "%.2f" % wall]
        print("| " + " | ".join(cells) + " |", flush=True)
    if a.breakdown and parts:
        keys = ["compute", "recompute", "collectives", "p2p", "bubble", "per step", "other",
                "step"]
        print()
        print("| model | slowest group | " + " | ".join(k + " s" for k in keys) + " |")
        print("|---|---|" + "---|" * len(keys))
        for name, b in parts:
            print("| %s | %d | " % (name, b["group"]) +
                  " | ".join("%.2f" % b[k] for k in keys) + " |")


if __name__ == "__main__":
    main()
