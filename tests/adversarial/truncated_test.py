#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Large graph and plan files cut off at random offsets.

Writes a valid graph of about RECSEARCH_ADV_MB MiB (default 48) into a
temporary folder, checks that `recsearch validate` accepts it whole, then
truncates it in place at seeded random offsets (largest first, so one file
serves every cut) and checks that each truncated file exits 1 within a time
limit, with a message naming the file and a byte offset or a JSON path, and
without growing the process far beyond the file's size. A saved plan of
that graph gets the same treatment through `recsearch eval`.

usage: truncated_test.py RECSEARCH [--mb N] [--cuts N] [--seed N]
"""

import argparse
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what, file=sys.stderr)


def write_chain(path, target_bytes):
    """A chain x -> ReLU -> MatMul -> ReLU -> ... of about target_bytes; returns op count."""
    ops = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"format": "recsearch.graph", "version": 1, "name": "big chain",\n "tensors": [\n')
        f.write('  {"name": "t0", "shape": [64, 256], "dtype": "f32", "kind": "input"},\n')
        f.write('  {"name": "w", "shape": [256, 256], "dtype": "f32", "kind": "parameter"}')
        # Tensors first, operators after: estimate the count from record sizes.
        n = max(2, target_bytes // 150)
        for i in range(1, n + 1):
            f.write(',\n  {"name": "t%d", "shape": [64, 256], "dtype": "f32"}' % i)
        f.write('\n ],\n "operators": [\n')
        for i in range(1, n + 1):
            if i > 1:
                f.write(",\n")
            if i % 2:
                f.write('  {"name": "relu%d", "type": "ReLU", "inputs": ["t%d"], "outputs": ["t%d"]}'
                        % (i, i - 1, i))
            else:
                f.write('  {"name": "mm%d", "type": "MatMul", "inputs": ["t%d", "w"], "outputs": ["t%d"]}'
                        % (i, i - 1, i))
            ops += 1
        f.write("\n ]\n}\n")
    return ops


def run(cmd, limit_s):
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return None, "", time.monotonic() - start
    return r.returncode, r.stderr.decode("utf-8", "replace"), time.monotonic() - start


def peak_child_rss_mib():
    # ru_maxrss is in KiB on Linux: the largest of all waited-for children.
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def truncation_cases(label, path, cmd_for, size, cuts, rng, limit_s):
    # Every file ends in "}\n": a cut before the last two bytes is invalid.
    offsets = sorted({rng.randrange(0, size - 2) for _ in range(cuts)} | {0, 1, size - 2},
                     reverse=True)
    worst = 0.0
    for off in offsets:
        os.truncate(path, off)
        rc, err, secs = run(cmd_for(path), limit_s)
        worst = max(worst, secs)
        name = "%s cut at byte %d of %d" % (label, off, size)
        check(rc is not None, name + ": did not finish within %d s" % limit_s)
        if rc is None:
            continue
        check(rc == 1, name + ": exit %s, expected 1 (stderr: %s)" % (rc, err.strip()[:300]))
        check(os.path.basename(path) in err, name + ": message does not name the file: " + err[:300])
        m = re.search(r"at byte (\d+)", err)
        has_path = re.search(r": /[^ ]*: ", err) is not None
        check(m is not None or has_path,
              name + ": message gives neither a byte offset nor a JSON path: " + err[:300])
        if m:
            check(int(m.group(1)) <= off, name + ": byte offset %s beyond the end" % m.group(1))
    print("%s: %d truncations, slowest %.2f s" % (label, len(offsets), worst))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("recsearch")
    ap.add_argument("--mb", type=int, default=int(os.environ.get("RECSEARCH_ADV_MB", "48")))
    ap.add_argument("--cuts", type=int, default=5)
    ap.add_argument("--seed", type=int, default=20261121)
    args = ap.parse_args()
    exe = args.recsearch
    rng = random.Random(args.seed)
    # Generous for sanitizer builds; a plain build needs a fraction.
    limit_s = max(120, args.mb * 3)

    with tempfile.TemporaryDirectory(prefix="recsearch-adv-") as tmp:
        graph = os.path.join(tmp, "big.json")
        ops = write_chain(graph, args.mb << 20)
        size = os.path.getsize(graph)
        print("graph: %d operators, %.1f MiB" % (ops, size / 2**20))

        rc, err, secs = run([exe, "validate", graph], limit_s)
        check(rc == 0, "the whole graph does not validate: %s %s" % (rc, err[:300]))
        print("whole graph validated in %.2f s, peak RSS %.0f MiB" % (secs, peak_child_rss_mib()))

        # A plan of a smaller prefix graph: eval reads graph and plan.
        small = os.path.join(tmp, "small.json")
        write_chain(small, min(size, 8 << 20))
        plan = os.path.join(tmp, "plan.json")
        rc, err, secs = run([exe, "search", small, "--devices", "8", "-q", "-o", plan], limit_s)
        check(rc == 0, "search of the plan graph failed: %s %s" % (rc, err[:300]))
        if rc == 0:
            psize = os.path.getsize(plan)
            truncation_cases("plan", plan, lambda p: [exe, "eval", small, p, "-q", "--devices", "8"],
                             psize, args.cuts, rng, limit_s)

        truncation_cases("graph", graph, lambda p: [exe, "validate", p], size, args.cuts, rng, limit_s)

        peak = peak_child_rss_mib()
        print("peak RSS of any run: %.0f MiB for a %.0f MiB file" % (peak, size / 2**20))
        # The text, the streamed records and the graph: a small multiple of
        # the file, never an unbounded blow-up. The peak includes the search
        # that made the plan; under AddressSanitizer its shadow memory and
        # allocation quarantine add a fixed amount on top.
        slack = 1536 if os.environ.get("ASAN_OPTIONS") else 512
        check(peak < 40 * size / 2**20 + slack, "peak RSS %.0f MiB is out of proportion" % peak)

    if FAILURES:
        print("%d failure(s)" % len(FAILURES), file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
