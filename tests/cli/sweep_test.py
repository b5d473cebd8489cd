#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `recsearch sweep` (docs/sweep.md).

Run by meson as `sweep_test.py RECSEARCH_EXE`. Standard library only; the
sample graphs and clusters come from $RECSEARCH_DATA. Every figure of the
sweep is checked against what `recsearch search` says about the same point:
a device sweep's points are plain searches, a budget sweep's are never
slower than a search at their budget and never rise as the budget grows.
Usage errors must exit 2 and name the option at fault. All failures are
listed before the test fails.
"""

import csv
import io
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("RECSEARCH_DATA") or os.path.join(HERE, "..", "..", "data")
GRAPH = os.path.join(DATA, "graphs", "ffn.json")
CLUSTER = os.path.join(DATA, "clusters", "dgx_h100_64x8.json")
GIB = float(1 << 30)
COLUMNS = ["budget_gib", "devices", "mesh", "fits", "step_time_s", "compute_s",
           "communication_s", "memory_gib", "parameter_gib", "activation_gib", "samples_per_s",
           "tokens_per_s", "model_tflops_per_device", "scaling_efficiency",
           "found_at_budget_gib", "search_time_s", "smallest_gib", "note",
           "exposed_communication_s", "gradient_gib", "optimizer_gib", "recompute", "zero_stage",
           "microbatches", "bubble_s", "stages", "virtual_stages", "recompute_detail",
           "zero_detail"]

EXE = None
FAILURES = []
# Under the sanitizers (tools/sanitize.sh) the budget sweep's rows are
# cross-checked against their own `search` on every third row only: the
# checks of the sweep's own output stay on every row.
REDUCED = os.environ.get("RECSEARCH_TEST_REDUCED", "0") not in ("", "0")


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return bool(cond)


def run(args, expect=0):
    p = subprocess.run([EXE] + args, capture_output=True, text=True, timeout=900)
    check(p.returncode == expect, "recsearch %s -> %d (expected %d): %s" %
          (" ".join(args), p.returncode, expect, p.stderr[-1000:]))
    check("internal error" not in p.stderr, "internal error: %s" % p.stderr)
    return p


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def search_step(cluster_args, memory_gib=None):
    """Step time of `recsearch search` at one point, None when nothing fits."""
    args = ["search", GRAPH] + cluster_args
    if memory_gib is not None:
        args += ["--memory", repr(memory_gib)]
    p = subprocess.run([EXE] + args, capture_output=True, text=True, timeout=900)
    if p.returncode == 3:
        return None
    check(p.returncode == 0, "search %s: %s" % (args, p.stderr))
    return json.loads(p.stdout)["summary"] if p.returncode == 0 else None


def rows_of(text):
    rows = list(csv.reader(io.StringIO(text)))
    check(rows and rows[0] == COLUMNS, "csv header: %r" % (rows[0] if rows else None))
    for r in rows[1:]:
        check(len(r) == len(COLUMNS), "csv row has %d fields: %r" % (len(r), r))
    return [dict(zip(COLUMNS, r)) for r in rows[1:]]


def budget_sweep():
    free = search_step(["--devices", "8"])
    mem = free["memory_per_device_bytes"] / GIB
    lo, step = mem * 0.05, mem * 0.1
    spec = "%r:%r:%r" % (lo, mem * 1.3, step)
    rows = rows_of(run(["sweep", GRAPH, "--devices", "8", "--memory", spec]).stdout)
    check(len(rows) >= 13, "budget sweep: %d rows for %s" % (len(rows), spec))
    last, seen_fit = math.inf, False
    for i, r in enumerate(rows):
        b = float(r["budget_gib"])
        cross_check = not REDUCED or i % 3 == 0
        if r["fits"] == "no":
            check(not seen_fit, "budget %g: no fit after a fitting budget" % b)
            check("no plan fits" in r["note"], "budget %g: no-fit note %r" % (b, r["note"]))
            check(r["smallest_gib"] and float(r["smallest_gib"]) > b,
                  "budget %g: smallest %r" % (b, r["smallest_gib"]))
            if cross_check:
                check(search_step(["--devices", "8"], b) is None,
                      "budget %g: search fits where the sweep says none does" % b)
            continue
        seen_fit = True
        s = float(r["step_time_s"])
        check(s <= last * (1 + 1e-9), "budget %g: step %g rose from %g" % (b, s, last))
        last = s
        check(float(r["memory_gib"]) <= b * (1 + 1e-5),
              "budget %g: memory %s" % (b, r["memory_gib"]))
        check(close(s, float(r["compute_s"]) + float(r["exposed_communication_s"]), 1e-4),
              "budget %g: step is not compute + exposed communication" % b)
        check(float(r["exposed_communication_s"]) <= float(r["communication_s"]) * (1 + 1e-6),
              "budget %g: more communication exposed than there is" % b)
        check(float(r["found_at_budget_gib"]) > 0, "budget %g: found_at" % b)
        own = search_step(["--devices", "8"], b) if cross_check else None
        if own is not None:
            check(s <= own["step_time_s"] * (1 + 1e-5),
                  "budget %g: sweep step %g slower than search's %g" % (b, s, own["step_time_s"]))
    check(seen_fit, "budget sweep: nothing fits")
    check(rows[0]["fits"] == "no", "budget sweep: 5%% of the free plan's memory fits")

    doc = json.loads(run(["sweep", GRAPH, "--devices", "8", "--memory", spec,
                          "--format", "json"]).stdout)
    check(doc["format"] == "recsearch.sweep" and doc["version"] == 1, "json: format")
    check(doc["sweep"] == "memory" and len(doc["points"]) == len(rows), "json: points")
    k = doc["knee"]
    check(isinstance(k, int) and doc["points"][k]["fits"], "json: knee %r" % k)
    best = min(p["step_time_s"] for p in doc["points"] if p["fits"])
    check(doc["points"][k]["step_time_s"] <= best * 1.05, "json: knee not within 5%")
    for p, r in zip(doc["points"], rows):
        check(p["fits"] == (r["fits"] == "yes"), "json and csv disagree at %r" % p)
        if p["fits"]:
            check(close(p["step_time_s"], float(r["step_time_s"]), 1e-5), "json step %r" % p)
        else:
            check("note" in p and "smallest_gib" in p, "json no-fit point %r" % p)

    # The html view: on every third budget (and the last) in the reduced run.
    out = os.path.join(TMP, "sweep.html")
    html_spec = "%r:%r:%r" % (lo, mem * 1.3, step * 3) if REDUCED else spec
    run(["sweep", GRAPH, "--devices", "8", "--memory", html_spec, "--format", "html", "-o", out])
    with open(out) as f:
        html = f.read()
    check(html.startswith("<!DOCTYPE html>"), "html: doctype")
    check(html.count("<svg") == 2, "html: %d charts" % html.count("<svg"))
    for bad in ("<script", "<link", "src=", "@import"):
        check(bad not in html, "html: not self-contained (%s)" % bad)


def device_sweeps():
    rows = rows_of(run(["sweep", GRAPH, "--devices", "1:8"]).stdout)
    check([r["devices"] for r in rows] == ["1", "2", "4", "8"], "devices 1:8: %r" % rows)
    for r in rows:
        own = search_step(["--devices", r["devices"]])
        check(close(float(r["step_time_s"]), own["step_time_s"], 1e-5),
              "devices %s: sweep %s, search %r" % (r["devices"], r["step_time_s"], own))
    check(close(float(rows[0]["scaling_efficiency"]), 1.0), "efficiency of the first point")

    rows = rows_of(run(["sweep", GRAPH, "--mesh", "2x2,2x4", "--memory", "40"]).stdout)
    check([r["mesh"] for r in rows] == ["2x2", "2x4"], "mesh list: %r" % rows)
    for r in rows:
        check(float(r["budget_gib"]) == 40, "mesh list: budget %r" % r["budget_gib"])
        own = search_step(["--mesh", r["mesh"]], 40)
        check(close(float(r["step_time_s"]), own["step_time_s"], 1e-5), "mesh %s" % r["mesh"])

    rows = rows_of(run(["sweep", GRAPH, "--cluster", CLUSTER, "--nodes", "1:4"]).stdout)
    check([r["devices"] for r in rows] == ["8", "16", "32"], "nodes 1:4: %r" %
          [r["devices"] for r in rows])
    check([r["mesh"] for r in rows] == ["1x8", "2x8", "4x8"], "nodes mesh labels")
    doc = json.loads(run(["sweep", GRAPH, "--devices", "2,4", "--format", "json"]).stdout)
    check(doc["sweep"] == "devices" and "scaling_efficiency" in doc["points"][1],
          "device json: %r" % doc)


def training_and_stages():
    # Pinned training settings hold at every point.
    rows = rows_of(run(["sweep", GRAPH, "--devices", "8", "--memory", "40,80", "--zero", "0",
                        "--recompute", "none", "--microbatches", "1"]).stdout)
    for r in rows:
        check((r["zero_stage"], r["recompute"], r["microbatches"]) == ("0", "none", "1"),
              "pinned training settings: %r" % r)
    # Two pinned pipeline stages on a small GPT: every point is pipelined,
    # with a bubble, and its step time is what `search --stages 2` reports.
    gpt = os.path.join(TMP, "gpt.json")
    run(["gen", "gpt", "--layers", "4", "--hidden", "256", "--heads", "8", "--seq", "128",
         "--vocab", "1000", "--batch", "16", "-o", gpt])
    rows = rows_of(run(["sweep", gpt, "--cluster", CLUSTER, "--nodes", "2,4",
                        "--stages", "2"]).stdout)
    check([r["stages"] for r in rows] == ["2", "2"], "--stages 2: %r" % rows)
    for r in rows:
        check(float(r["bubble_s"]) > 0, "a pipelined point has a bubble: %r" % r)
        out = os.path.join(TMP, "staged.json")
        cluster = os.path.join(TMP, "c%s.json" % r["devices"])
        with open(CLUSTER) as f:
            doc = json.load(f)
        doc["levels"][0]["size"] = int(r["devices"]) // 8
        with open(cluster, "w") as f:
            json.dump(doc, f)
        run(["search", gpt, "--cluster", cluster, "--stages", "2", "-q", "-o", out])
        with open(out) as f:
            plan = json.load(f)
        check(close(float(r["step_time_s"]), plan["summary"]["step_time_s"], 1e-5),
              "stages: sweep %s, search %r" % (r["step_time_s"], plan["summary"]))


def usage_errors():
    cases = [
        (["--devices", "8", "--memory", "80:10"], "--memory"),
        (["--devices", "8", "--memory", "a:b"], "--memory"),
        (["--devices", "8", "--memory", "1:2:0"], "--memory"),
        (["--devices", "1.5,2"], "--devices"),
        (["--devices", "8"], "nothing to sweep"),
        (["--memory", "1:2"], "--devices"),
        (["--devices", "8", "--mesh", "2x4", "--memory", "1:2"], "only one"),
        (["--devices", "8", "--nodes", "1:4", "--memory", "1:2"], "--nodes"),
        (["--devices", "2,4", "--memory", "1:2"], "one thing at a time"),
        (["--mesh", "2y4,2x2"], "--mesh"),
        (["--devices", "2,4", "--stages", "two"], "--stages"),
    ]
    for args, word in cases:
        p = run(["sweep", GRAPH] + args, expect=2)
        check(word in p.stderr, "sweep %s: message lacks %r: %s" % (args, word, p.stderr))


def main():
    global EXE, TMP
    if len(sys.argv) != 2:
        print("usage: sweep_test.py RECSEARCH_EXE", file=sys.stderr)
        return 2
    EXE = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="recsearch_sweep_") as tmp:
        TMP = tmp
        budget_sweep()
        device_sweeps()
        training_and_stages()
        usage_errors()
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("sweep: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
