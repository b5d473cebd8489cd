#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Budget monotonicity of rec over the model zoo (issue 19).

A plan that fits a budget fits every looser one, so the plan rec finds
under a looser budget must never be slower than the one it finds under a
tighter budget. For every model of data/graphs/zoo/zoo.json (on the device
count of its benchmark) and every bundled graph of data/graphs (on 8
devices and on a 4x8 mesh) this runs `recsearch search` with the device's
default budget, then at 1.0, 0.9, 0.7 and 0.5 of the default plan's memory
per device (each a hair over, 1e-9: the plan file rounds memory to bytes),
and checks that the step time never grows as the budget loosens (a
relative tolerance of 1e-9 for rounding). A budget where rec
finds no plan is reported and skipped: nothing to compare. Exits 1 on a
violation.

    tools/zoo/budget_monotone.py [--recsearch EXE] [--models a,b]
        [--fractions 1,0.9,0.7,0.5] [--level operator|training] [--json FILE]

--level operator (default) searches as tools/zoo/quality_report.py's table
does (--recompute none --zero 0 --microbatches 1: one training setting);
--level training leaves the settings to the search (much slower on the
large models). Standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality_report import OPERATOR_LEVEL, ROOT, ZOO, cluster_args, find_exe  # noqa: E402

BUNDLED = ["bert_large", "gpt2_block", "resnet50", "ffn"]
BUNDLED_CLUSTERS = [{"devices": 8}, {"mesh": "4x8"}]


def cases(only):
    with open(os.path.join(ZOO, "zoo.json")) as f:
        models = json.load(f)["models"]
    for m in models:
        yield m["name"], os.path.join(ZOO, m["name"] + ".json"), m
    for name in BUNDLED:
        for c in BUNDLED_CLUSTERS:
            yield name, os.path.join(ROOT, "data", "graphs", name + ".json"), c


def search(exe, graph, cluster, level, budget_gib, tmp):
    """(step s, memory bytes) of rec's plan, or None where nothing fits."""
    cmd = [exe, "search", graph] + cluster_args(cluster) + level + [
        "--detail", "summary", "-q", "-o", tmp]
    if budget_gib is not None:
        cmd += ["--memory", repr(budget_gib)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 3:
        return None
    if p.returncode != 0:
        sys.exit("budget_monotone: %s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr))
    with open(tmp) as f:
        s = json.load(f)["summary"]
    return s["step_time_s"], s["memory_per_device_bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recsearch")
    ap.add_argument("--models", help="comma-separated names (zoo or bundled)")
    ap.add_argument("--fractions", default="1,0.9,0.7,0.5")
    ap.add_argument("--level", choices=["operator", "training"], default="operator")
    ap.add_argument("--json", help="write every point here")
    a = ap.parse_args()
    exe = find_exe(a.recsearch)
    level = OPERATOR_LEVEL if a.level == "operator" else []
    only = set(a.models.split(",")) if a.models else None
    fractions = [float(x) for x in a.fractions.split(",")]
    violations, rows = [], []
    t_all = time.time()
    with tempfile.TemporaryDirectory() as d:
        tmp = os.path.join(d, "plan.json")
        for name, graph, cluster in cases(only):
            if only and name not in only:
                continue
            where = " ".join(cluster_args(cluster))
            t0 = time.time()
            free = search(exe, graph, cluster, level, None, tmp)
            if free is None:
                print("%-26s %-12s no fit at the default budget" % (name, where), flush=True)
                continue
            # Loosest first: the default budget, then the fractions of its plan's memory.
            points = [("default", free)]
            for f in fractions:
                # A hair over: the plan file rounds memory to whole bytes.
                r = search(exe, graph, cluster, level, f * free[1] * (1 + 1e-9) / 2**30, tmp)
                points.append(("%g" % f, r))
            steps = [p[1][0] if p[1] else None for p in points]
            bad = []
            for i in range(len(points)):
                for j in range(i + 1, len(points)):
                    if steps[i] is not None and steps[j] is not None and \
                            steps[i] > steps[j] * (1 + 1e-9):
                        bad.append((points[i][0], steps[i], points[j][0], steps[j]))
            violations += [(name, where) + b for b in bad]
            rows.append({"model": name, "cluster": where, "points": [
                {"budget": p[0], "step_time_s": p[1][0] if p[1] else None,
                 "memory_bytes": p[1][1] if p[1] else None} for p in points]})
            print("%-26s %-12s %s  %s  (%.1f s)" % (
                name, where, " ".join("%s:%s" % (p[0], "%.6g" % p[1][0] if p[1] else "no-fit")
                                      for p in points),
                "MONOTONE" if not bad else "VIOLATION", time.time() - t0), flush=True)
    print("%d graph/cluster pairs, %d violations, %.0f s" % (len(rows), len(violations),
                                                           time.time() - t_all))
    for v in violations:
        print("violation: %s %s: budget %s step %.9g s > budget %s step %.9g s" % v)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"level": a.level, "fractions": fractions, "rows": rows}, f, indent=1)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
