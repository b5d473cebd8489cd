#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shared library exports the C API and nothing else, under its SONAME.

Run as `symbols_test.py LIBRARY`. Reads the dynamic symbol table with
`nm -D --defined-only` and the SONAME with `readelf -d` (binutils), and
checks every function the header declares is exported.
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "..", "include", "recsearch", "recsearch.h")


def main():
    lib = sys.argv[1]
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    problems = []
    foreign = sorted(n for n in names if not n.startswith("rs_"))
    if foreign:
        problems.append("%d exported symbol(s) outside rs_: %s" %
                        (len(foreign), ", ".join(foreign[:20])))
    with open(HEADER, encoding="utf-8") as f:
        declared = set(re.findall(r"^\w[\w\s\*]*?\b(rs_\w+)\(", f.read(), re.M))
    missing = sorted(declared - set(names))
    if len(declared) < 40:
        problems.append("found only %d declarations in the header" % len(declared))
    if missing:
        problems.append("declared but not exported: " + ", ".join(missing))
    extra = sorted(set(n for n in names if n.startswith("rs_")) - declared)
    if extra:
        problems.append("exported but not declared in recsearch.h: " + ", ".join(extra))
    dyn = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dyn)
    if not m or not re.fullmatch(r"librecsearch\.so\.\d+", m.group(1)):
        problems.append("SONAME is %s, expected librecsearch.so.<major>" %
                        (m.group(1) if m else "missing"))
    for p in problems:
        print("FAIL: " + p)
    print("%d rs_ symbols exported, %d declared" % (len(names), len(declared)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
