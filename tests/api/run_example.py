#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs one of the README's minimal programs (docs/examples) as a user would,
from a directory holding the repository's data/, and checks what it did: the
summary line it printed, and (for the C++ program) the plan file it wrote,
which must be the plan `recsearch search` writes for the same graph and mesh.

    run_example.py EXAMPLE SOURCE_ROOT [RECSEARCH]
"""
import json
import os
import re
import subprocess
import sys
import tempfile

TIMING = {"search_time_s"}


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k not in TIMING}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main():
    exe, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    cli = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(os.path.join(root, "data"), os.path.join(tmp, "data"))
        p = subprocess.run([exe], cwd=tmp, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("example failed (%d): %s" % (p.returncode, p.stderr))
        if not re.fullmatch(r"step [0-9.e+-]+ s, [0-9.e+-]+ GiB per device\n", p.stdout):
            sys.exit("unexpected summary line: %r" % p.stdout)
        if cli is None:
            return 0
        with open(os.path.join(tmp, "plan.json")) as f:
            plan = json.load(f)
        q = subprocess.run([cli, "search", "data/graphs/gpt2_block.json", "--mesh", "2x4", "-q"],
                           cwd=tmp, capture_output=True, text=True, check=True)
        if strip(plan) != strip(json.loads(q.stdout)):
            sys.exit("the example's plan differs from `recsearch search`'s")
        step = plan["summary"]["step_time_s"]
        if "%.4g" % step not in p.stdout:
            sys.exit("summary line %r does not show the plan's step time %g" % (p.stdout, step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
