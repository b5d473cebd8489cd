#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plans of every zoo model and bundled graph, for checking that a change
leaves them identical.

Runs `recsearch search` (rec, training, the device count or mesh of the
model's benchmark; the bundled graphs on 8 devices and on a 2x4 mesh) and
writes each plan, with the measured search time removed, to OUT/NAME.json.
With --compare DIR it then reports every plan that differs from DIR's.

    tools/zoo/plan_digest.py OUT [--recsearch EXE] [--compare DIR]

Exit status: 0 when every plan matches (or no --compare), 1 otherwise.
Standard library only.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

from quality_report import find_exe  # the same rule for which build to run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = os.path.join(ROOT, "data", "graphs", "zoo")
TIMING_KEYS = {"search_time_s"}


def cases():
    with open(os.path.join(ZOO, "zoo.json")) as f:
        for m in json.load(f)["models"]:
            graph = os.path.join(ZOO, m["name"] + ".json")
            if not os.path.exists(graph):
                continue  # generated on demand only; too large to commit
            cl = ["--mesh", m["mesh"]] if "mesh" in m else ["--devices", str(m["devices"])]
            yield "zoo-" + m["name"], graph, cl
    for graph in sorted(glob.glob(os.path.join(ROOT, "data", "graphs", "*.json")) +
                        glob.glob(os.path.join(ROOT, "data", "graphs", "tiny", "*.json"))):
        base = os.path.splitext(os.path.basename(graph))[0]
        yield base + "-8", graph, ["--devices", "8"]
        yield base + "-2x4", graph, ["--mesh", "2x4"]


def strip_timing(node):
    if isinstance(node, dict):
        return {k: strip_timing(v) for k, v in node.items() if k not in TIMING_KEYS}
    if isinstance(node, list):
        return [strip_timing(v) for v in node]
    return node


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--recsearch")
    ap.add_argument("--compare")
    args = ap.parse_args()
    exe = find_exe(args.recsearch)
    os.makedirs(args.out, exist_ok=True)
    differ = []
    for name, graph, cl in cases():
        cmd = [exe, "search", graph] + cl + ["-q", "-o", "-"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            result = {"exit": p.returncode, "stderr": p.stderr.strip()}
        else:
            result = strip_timing(json.loads(p.stdout))
        path = os.path.join(args.out, name + ".json")
        with open(path, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        if args.compare:
            ref = os.path.join(args.compare, name + ".json")
            same = os.path.exists(ref) and json.load(open(ref)) == result
            if not same:
                differ.append(name)
            print("%-36s %s" % (name, "same" if same else "DIFFERS"))
        else:
            print("%-36s written" % name)
    if args.compare:
        print("plan_digest: %d differ" % len(differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
