#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`recsearch calibrate` under mpirun -np 2 (meson suite `exec`).

The cluster file it writes must pass the cluster reader (`search --cluster
FILE --strict`, so an unknown key fails too), hold positive finite figures,
and the fits must reproduce the measured collective times of the sizes
they were fitted on. The fit is absolute least squares (the large messages
dominate a step) of a line, and this machine's MPI is about ten times slower
per byte above ~1 MiB than below, so the tolerance has a relative and an
absolute part: each kind's own fit within 50% of every measured time plus
20% of that kind's largest measured time, and the cluster's joint fit (one
latency and bandwidth for all four kinds, as the file holds) within 100%
plus 40% of the largest time of all. The memory figure is recomputed from
the kernel samples: each kernel's bytes are 4 x the elements of its input
and output shapes (the cost model's count, f32), the file's
memory_bandwidth_GBps is (1 + backward_flops_factor) x their bytes over
their forward + backward seconds (no GEMM is among them), and the set
holds the GPT-2 block's kinds. The kernels read and write at most what a
streaming copy does (within 2x: their blocks are smaller and may sit in a
cache the copy's do not). The GEMM figure is recomputed from the MatMul
samples: the set is the documented one (for (tokens, h) = (512, 256),
(256, 512), (128, 1024): [tokens, h] x [h, 4h] and [tokens, 4h] x [4h, h]
whole, tokens split by 2 and 4, 4h split by 2 and 4), each sample's flops
are 2mnk and its bytes 4 x its elements, the file's peak_TFLOPs is
(1 + backward_flops_factor) x their flops over their forward + backward
seconds, and the model's price of the set at the file's figures is at
least the measured time (the bytes term can only add). The square GEMMs'
median is kept beside it. A wrong --np is a usage error (exit 2) on every
rank.
Exit 77 (skipped) when mpirun is absent.

usage: calibrate_test.py RECSEARCH SOURCE_ROOT
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


def positive_finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    binary, root = sys.argv[1], sys.argv[2]
    if shutil.which("mpirun") is None:
        print("mpirun not found: skipped")
        return 77
    tmp = tempfile.mkdtemp(prefix="rs_calibrate_")
    cluster = os.path.join(tmp, "cluster.json")
    samples = os.path.join(tmp, "samples.json")
    base = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", binary, "calibrate"]
    p = subprocess.run(base + ["--np", "2", "-o", cluster, "--samples", samples, "--reps", "5"],
                       capture_output=True, text=True, env=ENV, timeout=240)
    print(p.stdout, p.stderr, flush=True)
    if not check(p.returncode == 0, f"calibrate exit {p.returncode}"):
        return 1

    # The cluster reader accepts it, strictly, and a search runs on it.
    plan = os.path.join(tmp, "plan.json")
    s = subprocess.run([binary, "search", os.path.join(root, "data/graphs/ffn.json"), "--cluster",
                        cluster, "--strict", "-o", plan], capture_output=True, text=True,
                       timeout=120)
    check(s.returncode == 0, f"search --cluster --strict exit {s.returncode}: {s.stderr}")

    with open(cluster) as f:
        c = json.load(f)
    check(c["format"] == "recsearch.cluster" and c["version"] == 1, "format and version")
    check(len(c["levels"]) == 1 and c["levels"][0]["size"] == 2, f"one level of 2: {c['levels']}")
    lv = c["levels"][0]
    check(positive_finite(lv["bandwidth_GBps"]), f"bandwidth {lv['bandwidth_GBps']}")
    check(math.isfinite(lv["latency_us"]) and lv["latency_us"] >= 0, f"latency {lv['latency_us']}")
    for key in ("peak_TFLOPs", "memory_GiB", "memory_bandwidth_GBps"):
        check(positive_finite(c["device"][key]), f"device {key} {c['device'][key]}")
    check(c.get("cost", {}) == {"compute_efficiency": 1, "overlap": False}, f"cost {c.get('cost')}")

    with open(samples) as f:
        m = json.load(f)
    kinds = {x["kind"] for x in m["collectives"]}
    check(kinds == {"all-reduce", "all-gather", "reduce-scatter", "all-to-all"}, f"kinds {kinds}")
    check(len(m["collectives"]) >= 12, "a few sizes of each kind")
    check(abs(m["link"]["bandwidth_Bps"] / 1e9 - lv["bandwidth_GBps"]) <=
          1e-9 * lv["bandwidth_GBps"], "the file holds the joint fit")
    top = max(x["seconds"] for x in m["collectives"])
    for x in m["collectives"]:
        what = f"{x['kind']} {x['elements']:.0f} elements"
        check(positive_finite(x["seconds"]) and positive_finite(x["bytes"]), f"{what}: measured")
        kind_top = max(y["seconds"] for y in m["collectives"] if y["kind"] == x["kind"])
        check(abs(x["fit_seconds"] - x["seconds"]) <= 0.5 * x["seconds"] + 0.2 * kind_top,
              f"{what}: own fit {x['fit_seconds']:.3g} s vs measured {x['seconds']:.3g} s")
        check(abs(x["cluster_seconds"] - x["seconds"]) <= x["seconds"] + 0.4 * top,
              f"{what}: joint fit {x['cluster_seconds']:.3g} s vs measured {x['seconds']:.3g} s")
        # The communicator's ring bytes on 2 ranks of n f32 elements contributed (2 blocks of n
        # for reduce-scatter and all-to-all): n elements each.
        want = 4 * x["elements"]
        check(abs(x["bytes"] - want) <= 0.5, f"{what}: bytes {x['bytes']} vs {want}")

    # The memory figure, recomputed from the kernels' own samples.
    ks = m["kernels"]
    names = {k["name"].split()[0] for k in ks}
    want_kinds = {"LayerNorm", "BiasAdd", "GeLU", "Mul", "Add", "Softmax", "Transpose"}
    check(want_kinds <= names, f"kernel kinds {names}")
    check(not any(k["gemm"] or "MatMul" in k["name"] for k in ks), "no GEMM among the kernels")
    for k in ks:
        elements = sum(math.prod(s) for s in k["inputs"] + k["outputs"])
        check(k["bytes"] == 4 * elements, f"{k['name']}: bytes {k['bytes']} vs 4 x {elements}")
        check(positive_finite(k["forward_s"]) and positive_finite(k["backward_s"]),
              f"{k['name']}: timed")
    mem = [k for k in ks if not k["gemm"]]
    nbytes = sum(k["bytes"] for k in mem)
    fwd = sum(k["forward_s"] for k in mem)
    bwd = sum(k["backward_s"] for k in mem)
    factor = m["backward_flops_factor"]
    check(factor == 2, f"backward_flops_factor {factor}: the cost model's default")
    want = (1 + factor) * nbytes / (fwd + bwd)
    got = c["device"]["memory_bandwidth_GBps"] * 1e9
    check(abs(got - want) <= 1e-9 * want, f"memory_bandwidth_GBps {got / 1e9} vs kernels {want / 1e9}")
    check(abs(m["kernel_forward_Bps"] - nbytes / fwd) <= 1e-9 * nbytes / fwd, "forward rate")
    check(abs(m["kernel_backward_ratio"] - bwd / fwd) <= 1e-9 * bwd / fwd, "backward ratio")
    check(positive_finite(m["copy_Bps"]), f"copy {m['copy_Bps']}")
    check(m["kernel_forward_Bps"] <= 2 * m["copy_Bps"],
          f"kernels {m['kernel_forward_Bps'] / 1e9:.2f} GB/s above twice the copy's "
          f"{m['copy_Bps'] / 1e9:.2f}")

    # The GEMM figure, recomputed from the MatMul samples.
    gs = m["gemms"]
    want_shapes = []
    for t, h in ((512, 256), (256, 512), (128, 1024)):
        f4 = 4 * h
        for mm, ff in ((t, f4), (t // 2, f4), (t // 4, f4), (t, f4 // 2), (t, f4 // 4)):
            want_shapes += [[[mm, h], [h, ff]], [[mm, ff], [ff, h]]]
    check(sorted(g["inputs"] for g in gs) == sorted(want_shapes),
          f"GEMM set {[g['inputs'] for g in gs]}")
    for g in gs:
        (mm, kk), (k2, nn) = g["inputs"]
        check(kk == k2 and g["outputs"] == [[mm, nn]], f"{g['name']}: shapes")
        check(g["name"].startswith("MatMul"), f"{g['name']}: a MatMul")
        check(g["flops"] == 2 * mm * kk * nn, f"{g['name']}: flops {g['flops']}")
        elements = sum(math.prod(s) for s in g["inputs"] + g["outputs"])
        check(g["bytes"] == 4 * elements, f"{g['name']}: bytes {g['bytes']} vs 4 x {elements}")
        check(positive_finite(g["forward_s"]) and positive_finite(g["backward_s"]),
              f"{g['name']}: timed")
    gflops = sum(g["flops"] for g in gs)
    gfwd = sum(g["forward_s"] for g in gs)
    gbwd = sum(g["backward_s"] for g in gs)
    want = (1 + factor) * gflops / (gfwd + gbwd)
    got = c["device"]["peak_TFLOPs"] * 1e12
    check(abs(got - want) <= 1e-9 * want, f"peak_TFLOPs {got / 1e12} vs matmuls {want / 1e12}")
    check(abs(m["gemm_flops_per_s"] - want) <= 1e-9 * want, "samples' gemm_flops_per_s")
    check(abs(m["gemm_forward_flops_per_s"] - gflops / gfwd) <= 1e-9 * gflops / gfwd,
          "GEMM forward rate")
    check(abs(m["gemm_backward_ratio"] - gbwd / gfwd) <= 1e-9 * gbwd / gfwd, "GEMM backward ratio")
    check(abs(m["gemm_measured_s"] - (gfwd + gbwd)) <= 1e-9 * (gfwd + gbwd), "GEMM measured time")
    check(m["gemm_model_s"] >= (1 - 1e-9) * m["gemm_measured_s"],
          f"model's price of the set {m['gemm_model_s']} below its measured time")
    squares = sorted(x["flops_per_s"] for x in m["gemm"])
    check([x["size"] for x in m["gemm"]] == [128, 256, 512], "square GEMM sizes")
    check(m["square_gemm_flops_per_s"] == squares[1], "square GEMMs' median")

    # --np that is not the world size: usage error, exit 2.
    p = subprocess.run(base + ["--np", "3"], capture_output=True, text=True, env=ENV, timeout=60)
    check(p.returncode == 2, f"--np 3 on 2 ranks: exit {p.returncode}")
    shutil.rmtree(tmp, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
