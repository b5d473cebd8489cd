#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a small variant of a bundled graph for the execution tests: every
dimension value is mapped through a table (e.g. batch 8 -> 4, seq 1024 -> 12),
shapes only, so the operators and their attributes stay those of the
original. Usage: shrink_graph.py IN OUT OLD=NEW [OLD=NEW ...] [--name NAME]
"""
import json
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst, rest = argv[0], argv[1], argv[2:]
    name = None
    table = {}
    i = 0
    while i < len(rest):
        if rest[i] == "--name":
            name = rest[i + 1]
            i += 2
            continue
        old, new = rest[i].split("=")
        table[int(old)] = int(new)
        i += 1
    with open(src) as f:
        g = json.load(f)
    for t in g["tensors"]:
        t["shape"] = [table.get(d, d) for d in t["shape"]]
    if name:
        g["name"] = name
    g["description"] = (g.get("description", "") + " (shrunk for execution tests: " +
                        ", ".join(f"{a}->{b}" for a, b in sorted(table.items())) + ")")
    with open(dst, "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
