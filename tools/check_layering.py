#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that no module of the library includes a header of a module above it.

The modules, bottom to top (src/meson.build builds one library each, linking
only the ones below):

    ir, algebra, cluster, cost, plan, search, io, onnx, report, gen, api, capi, exec

A file belongs to the module of its folder: src/<module>/... (sources and
private headers) and include/recsearch/<module>/... (public headers), with
two public headers outside such a folder named below. Every `#include "..."`
of a file in src/ or include/recsearch/ is resolved to the module of the
header it names; a header of a module later in the list than the file's own
is an upward include and fails the check. The headers of no module
(error.hpp, fwd.hpp, version.h, the umbrella recsearch.hpp) take the highest
module they include themselves, so including them is checked too.

Peers of the design's drawing (cluster and cost; io, onnx, report and gen)
are ordered as listed, which the code follows: cost reads the cluster,
onnx's public header lives under io/. The two front ends at the top, capi
and exec, may not include each other.

Usage: check_layering.py [SOURCE_ROOT]   (default: the checkout holding this
file). Prints each upward include as FILE:LINE: ... and exits 1 if any.
Registered as the Meson test `check_layering`.
"""

import os
import re
import sys

ORDER = ["ir", "algebra", "cluster", "cost", "plan", "search", "io", "onnx", "report", "gen",
         "api", "capi", "exec"]
RANK = {m: i for i, m in enumerate(ORDER)}
# (includer, included) pairs refused although the second is not above.
FORBIDDEN = {("exec", "capi"), ("capi", "exec")}

# Public headers that are not under include/recsearch/<module>/ of their module.
EXPLICIT = {
    "include/recsearch/cluster.hpp": "cluster",
    "include/recsearch/io/onnx.hpp": "onnx",  # the onnx module's API, next to io's
    "include/recsearch/recsearch.h": "capi",
    "include/recsearch/problem.hpp": "api",
    "include/recsearch/solution.hpp": "api",
    "include/recsearch/sweep.hpp": "api",
}

SOURCE_EXT = (".c", ".h", ".cpp", ".hpp", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def module_of_path(rel):
    """The module a file (path relative to the root) belongs to by its place,
    or None for the shared top-level headers."""
    if rel in EXPLICIT:
        return EXPLICIT[rel]
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2 and parts[1] in RANK:
        return parts[1]
    if parts[:2] == ["include", "recsearch"] and len(parts) > 3 and parts[2] in RANK:
        return parts[2]
    return None


def resolve(root, including, name):
    """The file an include names, relative to root: the including file's
    folder first (as the compiler does for quotes), then include/ and src/."""
    here = os.path.dirname(including)
    for base in (here, "include", "src"):
        rel = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, rel)) or (
                rel.endswith("version.h") and os.path.isfile(os.path.join(root, rel + ".in"))):
            return rel
    return None  # the standard library or a third-party header


def includes_of(root, rel):
    """[(line number, resolved path)] of a file's quoted includes."""
    found = []
    path = os.path.join(root, rel)
    if not os.path.isfile(path):  # version.h: generated from version.h.in
        path += ".in"
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if m:
                target = resolve(root, rel, m.group(1))
                if target is not None:
                    found.append((number, target))
    return found


def effective_module(root, rel, memo, visiting=()):
    """A file's module; for the shared headers, the highest module they
    include (None when they include none)."""
    if rel in memo:
        return memo[rel]
    own = module_of_path(rel)
    if own is None and rel not in visiting:
        ranks = [RANK[m] for _, t in includes_of(root, rel)
                 for m in [effective_module(root, t, memo, visiting + (rel,))] if m is not None]
        own = ORDER[max(ranks)] if ranks else None
    memo[rel] = own
    return own


def files_to_check(root):
    for top in ("src", os.path.join("include", "recsearch")):
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(folder, name), root)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    memo = {}
    problems = []
    checked = 0
    for rel in sorted(files_to_check(root)):
        own = module_of_path(rel)
        if own is None:
            continue  # shared headers: checked where they are included
        checked += 1
        for number, target in includes_of(root, rel):
            theirs = effective_module(root, target, memo)
            if theirs is None:
                continue
            if RANK[theirs] > RANK[own]:
                problems.append("%s:%d: module %s includes %s of module %s, which is above it" %
                                (rel, number, own, target, theirs))
            elif (own, theirs) in FORBIDDEN:
                problems.append("%s:%d: module %s includes %s of its peer %s" %
                                (rel, number, own, target, theirs))
    for p in problems:
        print(p)
    print("check_layering: %d files checked, %d upward includes" % (checked, len(problems)))
    if checked == 0:
        print("check_layering: no source found under %s" % root)
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
