#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Re-prices a calibration benchmark's plans with other device figures
(docs/exec.md, Model against the clock).

Reads what `calibration_bench.py --keep DIR` left (graphs, plans, calibrated
clusters) and its printed output (the calibrations and the table), and
prices the same plans with `recsearch eval --cluster` on each calibrated
cluster with its memory_bandwidth_GBps replaced by another figure the
calibration printed: the streaming copy's (what the file held before the
kernels were timed) or the memory-bound kernels' forward rate; and, with
`--gemm`, its peak_TFLOPs by the square GEMMs' median (what the file held
before the MatMul set was timed) or by the MatMul set's forward rate
(Σ flops / Σ forward seconds, without the backward's share); or, with
`--matmul` on the output of a calibration before the set (commit a39fd72
and earlier), by its one MatMul sample's forward rate. The
measured step times stay the benchmark's, so the comparison is of the
model's figures on the same plans and the same clock (the search on
another cluster might have chosen other plans). Prints the Spearman rank
correlation and the median absolute relative error for each variant; the
"file" variant must reproduce the predictions exec printed.

usage: reprice_bench.py DIR BENCH_OUTPUT [--bin build/tools/recsearch/recsearch] [--gemm]
                       [--matmul]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One rank correlation for the benchmark and its re-pricing.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calibration_bench import spearman  # noqa: E402
ROW_RE = re.compile(r"\| (\w+) \| (\d+) \| ([\w-]+) \| [\w-]* \| ([\d.]+) \| ([\d.]+) ")
# The one MatMul sample of calibrations before the set: [256,256] x [256,1024].
MATMUL_FLOPS = 2 * 256 * 256 * 1024


def calibrations(text):
    """Per rank count, the figures each calibration printed."""
    out = {}
    for block in text.split("recsearch calibrate: ")[1:]:
        n = int(block.split()[0])
        out[n] = {
            "copy": float(re.search(r"copy ([\d.]+) GB/s\)", block).group(1)),
            "kernel_forward": float(re.search(r"forward ([\d.]+) GB/s \(sum", block).group(1)),
        }
        old = re.search(r"MatMul \[256,256\]\s+\d+\s+([\d.]+)", block)
        if old:
            out[n]["matmul_TFLOPs"] = MATMUL_FLOPS / (float(old.group(1)) * 1e-3) / 1e12
        square = re.search(r"square GEMMs: ([\d.]+) GFLOP/s", block)
        if square:
            out[n]["square_TFLOPs"] = float(square.group(1)) / 1e3
        fwd = re.search(r"matmuls: forward ([\d.]+) GFLOP/s", block)
        if fwd:
            out[n]["gemm_forward_TFLOPs"] = float(fwd.group(1)) / 1e3
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("bench_output")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/tools/recsearch/recsearch"))
    ap.add_argument("--gemm", action="store_true",
                    help="also price the GEMMs at the square GEMMs' median and at the MatMul "
                    "set's forward rate")
    ap.add_argument("--matmul", action="store_true",
                    help="also price the GEMMs at the MatMul sample's forward rate (outputs "
                    "of calibrations before the MatMul set)")
    a = ap.parse_args()
    with open(a.bench_output) as f:
        text = f.read()
    figs = calibrations(text)
    rows = [(m.group(1), int(m.group(2)), m.group(3), float(m.group(4)), float(m.group(5)))
            for m in map(ROW_RE.match, text.splitlines()) if m]
    if len(rows) < 2:
        print("no benchmark table in", a.bench_output)
        return 1
    # (label, memory figure, GEMM figure): None keeps the file's.
    variants = [("file", None, None), ("copy", "copy", None),
                ("kernel forward", "kernel_forward", None)]
    if a.gemm:
        variants += [("square GEMMs", None, "square_TFLOPs"),
                     ("matmul forward", None, "gemm_forward_TFLOPs")]
    if a.matmul:
        variants += [("file + matmul", None, "matmul_TFLOPs"),
                     ("copy + matmul", "copy", "matmul_TFLOPs")]
    for _, _, gemm in variants:
        if gemm and any(gemm not in f for f in figs.values()):
            print(f"{a.bench_output}: the calibrations printed no {gemm} figure")
            return 1
    meas = [r[4] for r in rows]
    for label, memory, gemm in variants:
        pred = []
        for graph, n, algo, _, _ in rows:
            with open(os.path.join(a.dir, f"cluster{n}.json")) as f:
                c = json.load(f)
            if memory:
                c["device"]["memory_bandwidth_GBps"] = figs[n][memory]
            if gemm:
                c["device"]["peak_TFLOPs"] = figs[n][gemm]
            path = os.path.join(a.dir, f"reprice_{n}.json")
            with open(path, "w") as f:
                json.dump(c, f)
            out = subprocess.run([a.bin, "eval", os.path.join(a.dir, graph + ".json"),
                                  os.path.join(a.dir, f"{graph}_{n}_{algo}.plan.json"),
                                  "--cluster", path, "-q"],
                                 capture_output=True, text=True, check=True).stdout
            pred.append(json.loads(out)["summary"]["step_time_s"] * 1e3)
        rel = statistics.median(abs(p - m) / m for p, m in zip(pred, meas))
        within = ", ".join(
            f"{g} {spearman([p for p, r in zip(pred, rows) if r[0] == g], [r[4] for r in rows if r[0] == g]):.3f}"
            for g in sorted({r[0] for r in rows}))
        line = f"{label:15} Spearman {spearman(pred, meas):.3f}, median |error| {rel:.1%}; within {within}"
        if label == "file":
            off = max(abs(p - r[3]) for p, r in zip(pred, rows))
            line += f"; max |eval - exec's prediction| {off:.4f} ms"
        print(line)
    for n, f in sorted(figs.items()):
        gemms = ", ".join(f"{k.replace('_TFLOPs', '')} {v * 1e3:.2f} GFLOP/s" for k, v in f.items()
                          if k.endswith("_TFLOPs"))
        print(f"  {n} ranks: copy {f['copy']} GB/s, kernels' forward {f['kernel_forward']} GB/s"
              f"{', ' + gemms if gemms else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
