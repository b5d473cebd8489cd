#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the cost model against the clock (docs/exec.md, Calibration).

Calibrates this machine on 2 and 4 ranks (`recsearch calibrate`), then for
every graph, rank count and algorithm (rec, data-parallel, megatron, grid)
searches a plan on the calibrated cluster, runs `recsearch exec --train
--steps N --cluster CALIBRATED` and compares the measured step time, and
each phase, with the prediction exec prints next to it (the cost model on
the calibrated cluster, split into phases by exec::predicted_phase_times).
Prints the table, the Spearman rank correlation of predicted against
measured step time, and the median absolute relative error.

A benchmark, not a test: on a shared machine the clock moves with the load
(/proc/loadavg is printed before and after).

usage: calibration_bench.py [--bin build/tools/recsearch/recsearch] [--steps 3]
                            [--ranks 2,4] [--algos rec,data-parallel,megatron,grid]
                            [--keep DIR]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")

# The benchmark graphs: bundled graphs resized (every dimension of a value
# mapped, as tests/exec/shrink_graph.py does) so that one exec step takes
# tens to hundreds of milliseconds here, and made f32 throughout, since exec
# moves f32 elements and the cost model prices the graph's dtypes.
GRAPHS = [
    ("ffn", "data/graphs/ffn.json", {32: 512}),
    ("mlp", "data/graphs/tiny/mlp_huge_weights.json", {8: 256, 4096: 1024, 16384: 2048}),
    ("gpt2", "data/graphs/gpt2_block.json",
     {8: 2, 12: 4, 768: 256, 1024: 128, 2304: 768, 3072: 1024}),
]


def run(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def mpirun(n, args, timeout=600):
    return run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)] + args,
               timeout)


def make_graph(src, dst, table, name):
    with open(os.path.join(ROOT, src)) as f:
        g = json.load(f)
    for t in g["tensors"]:
        t["shape"] = [table.get(d, d) for d in t["shape"]]
        if t.get("dtype") in ("f16", "bf16"):
            t["dtype"] = "f32"
    g["name"] = name
    with open(dst, "w") as f:
        json.dump(g, f)


STEP_RE = re.compile(r"step time \(slowest rank per phase\): mean ([\d.]+) ms, min ([\d.]+) ms; "
                     r"forward ([\d.]+), backward ([\d.]+), gradient sync ([\d.]+), "
                     r"optimizer ([\d.]+) ms")


PREDICTED_RE = re.compile(r"predicted by the cost model \([^)]*\): step ([\d.]+) ms; "
                          r"forward ([\d.]+), backward ([\d.]+), gradient sync ([\d.]+), "
                          r"optimizer ([\d.]+) ms")


def measured_phases(out):
    m = STEP_RE.search(out)
    if not m:
        raise RuntimeError("no step time in exec output:\n" + out)
    v = [float(x) / 1e3 for x in m.groups()]
    return {"step": v[0], "min_step": v[1], "forward": v[2], "backward": v[3], "sync": v[4],
            "optimizer": v[5]}


def predicted_phases(out):
    """The cost model's step and phases as exec prints them (its model time
    split by exec::predicted_phase_times, on the cluster given with --cluster)."""
    m = PREDICTED_RE.search(out)
    if not m:
        raise RuntimeError("no predicted step time in exec output:\n" + out)
    v = [float(x) / 1e3 for x in m.groups()]
    return {"step": v[0], "forward": v[1], "backward": v[2], "sync": v[3], "optimizer": v[4]}


def ranks_of(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks_of(a), ranks_of(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va > 0 and vb > 0 else float("nan")


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/tools/recsearch/recsearch"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--algos", default="rec,data-parallel,megatron,grid")
    ap.add_argument("--keep", help="keep the graphs, clusters, plans and outputs here")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="rs_calbench_")
    os.makedirs(tmp, exist_ok=True)
    print(f"loadavg before: {loadavg()}, {os.cpu_count()} cpu(s)", flush=True)

    clusters = {}
    for n in [int(x) for x in a.ranks.split(",")]:
        path = os.path.join(tmp, f"cluster{n}.json")
        out = mpirun(n, [a.bin, "calibrate", "--np", str(n), "-o", path])
        print(out, flush=True)
        clusters[n] = path

    graphs = []
    for name, src, table in GRAPHS:
        dst = os.path.join(tmp, name + ".json")
        make_graph(src, dst, table, name)
        graphs.append((name, dst))

    rows = []
    for name, gpath in graphs:
        for n, cpath in clusters.items():
            for algo in a.algos.split(","):
                plan = os.path.join(tmp, f"{name}_{n}_{algo}.plan.json")
                try:
                    run([a.bin, "search", gpath, "--cluster", cpath, "--algo", algo, "--zero", "0",
                         "--microbatches", "1", "--recompute", "none", "-q", "-o", plan])
                    out = mpirun(n, [a.bin, "exec", gpath, plan, "--train", "--steps",
                                     str(a.steps), "--cluster", cpath])
                    meas = measured_phases(out)
                    pred = predicted_phases(out)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"{name} {n} {algo}: skipped: {str(e).splitlines()[0]}", flush=True)
                    continue
                with open(plan) as f:
                    cuts = [o.get("cuts") for o in json.load(f).get("operators", [])]
                rows.append({"graph": name, "ranks": n, "algo": algo, "pred": pred, "meas": meas,
                             "cuts": json.dumps(cuts)})
                print(f"{name:5} {n} {algo:13} predicted {pred['step'] * 1e3:9.2f} ms, measured "
                      f"{meas['step'] * 1e3:9.2f} ms", flush=True)
    print(f"loadavg after: {loadavg()}", flush=True)
    if len(rows) < 2:
        print("too few runs")
        return 1

    phases = ["forward", "backward", "sync", "optimizer"]
    print("\n| graph | ranks | algorithm | same plan as | predicted ms | measured ms (min) | rel. "
          "error | fwd p/m | bwd p/m | sync p/m | opt p/m |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    seen = {}
    for r in rows:
        key = (r["graph"], r["ranks"], r["cuts"])
        same = seen.setdefault(key, r["algo"])
        p, m = r["pred"], r["meas"]
        rel = (p["step"] - m["step"]) / m["step"]
        cells = " | ".join(f"{p[ph] * 1e3:.1f}/{m[ph] * 1e3:.1f}" for ph in phases)
        print(f"| {r['graph']} | {r['ranks']} | {r['algo']} | {same if same != r['algo'] else ''}"
              f" | {p['step'] * 1e3:.2f} | {m['step'] * 1e3:.2f} ({m['min_step'] * 1e3:.2f}) | "
              f"{rel:+.0%} | {cells} |")
    pred = [r["pred"]["step"] for r in rows]
    meas = [r["meas"]["step"] for r in rows]
    rel = [abs(p - m) / m for p, m in zip(pred, meas)]
    print(f"\nplans: {len(rows)} over {len({r['graph'] for r in rows})} graph(s)")
    print(f"Spearman rank correlation (predicted vs measured step time): "
          f"{spearman(pred, meas):.3f}")
    print(f"median absolute relative error of the step time: {statistics.median(rel):.1%}")
    for ph in phases:
        pp = [r["pred"][ph] for r in rows]
        mm = [r["meas"][ph] for r in rows]
        print(f"  {ph:9}: Spearman {spearman(pp, mm):.3f}, measured total {sum(mm) * 1e3:.1f} ms, "
              f"predicted total {sum(pp) * 1e3:.1f} ms")
    for g in sorted({r["graph"] for r in rows}):
        sub = [r for r in rows if r["graph"] == g]
        rho = spearman([r["pred"]["step"] for r in sub], [r["meas"]["step"] for r in sub])
        print(f"  within {g}: Spearman {rho:.3f} over {len(sub)} plans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
