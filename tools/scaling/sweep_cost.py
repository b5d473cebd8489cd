#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The cost of `recsearch sweep` as users run it: the CLI end to end, the
curve written to a file, against the 10 s target of docs/sweep.md.

    tools/scaling/sweep_cost.py --build build [--repeat 2] [--stages]

Cases: a 20-point budget sweep of BERT-large on 2x8 and a 10-point device
sweep (8 to 4096) of GPT-39B; --stages adds the GPT-39B sweep on DGX-A100
nodes with the pipeline search (`--stages auto`). Prints one line per run
with the wall and CPU seconds and the load average before the run, and
exits 1 when a run fails (not when it is slow: the machine is shared, the
figures go in docs with the load noted).
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = os.path.join(ROOT, "data", "graphs", "zoo")

CASES = [
    ("bert-large budgets 1:20:1 on 2x8",
     [os.path.join(ZOO, "bert-large.json"), "--mesh", "2x8", "--memory", "1:20:1"]),
    ("gpt-39b devices 8:4096",
     [os.path.join(ZOO, "gpt-39b.json"), "--devices", "8:4096"]),
]
STAGE_CASES = [
    ("gpt-39b dgx-a100 nodes 1:64, --stages auto",
     [os.path.join(ZOO, "gpt-39b.json"), "--cluster",
      os.path.join(ROOT, "data", "clusters", "dgx_a100_64x8.json"), "--nodes", "1:64",
      "--stages", "auto"]),
]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(exe, name, args, out_dir):
    out = os.path.join(out_dir, "sweep.csv")
    load = os.getloadavg()[0]
    cpu0 = children_cpu()
    t0 = time.monotonic()
    p = subprocess.run([exe, "sweep", *args, "-q", "-o", out], capture_output=True, text=True)
    wall = time.monotonic() - t0
    cpu = children_cpu() - cpu0
    if p.returncode != 0:
        print(f"FAIL {name}: exit {p.returncode}: {p.stderr.strip()}")
        return False
    with open(out) as f:
        rows = sum(1 for _ in f) - 1
    print(f"{name}: {rows} points, wall {wall:.2f} s, cpu {cpu:.2f} s, load {load:.1f}, "
          f"{'under' if wall < 10 else 'OVER'} the 10 s target")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--stages", action="store_true", help="add the pipeline-search sweep")
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools", "recsearch", "recsearch")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES + (STAGE_CASES if a.stages else []):
            for _ in range(a.repeat):
                ok = run(exe, name, args, tmp) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
