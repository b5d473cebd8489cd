#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Strategy-quality report over the model zoo.

Runs `recsearch compare --format json` on every model of
data/graphs/zoo/zoo.json (generating a graph that is missing with
`recsearch gen`) on the device count it was benchmarked with, and writes a
markdown table: rec's estimated step time, every other algorithm's step time
as a ratio to rec's ("no fit" when it finds no plan within the memory
budget, "skipped" when it cannot run, e.g. an integer program too large),
search times, and the ilp/rec search-time ratio. Below the table, the
targets: rec within 5% of ilp where ilp finishes, rec within 2% of the best
of data-parallel / megatron / grid.

    tools/zoo/quality_report.py [--recsearch EXE] [--ilp-time-limit S]
        [--models a,b] [--output FILE] [--doc docs/quality.md] [--json FILE]

With --doc, the table replaces the text between the markers
<!-- quality-table:begin --> and <!-- quality-table:end --> in that file
(docs/quality.md holds the published table).
Standard library only.
"""

import argparse
import glob
import json
import os
import subprocess
import tempfile
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = os.path.join(ROOT, "data", "graphs", "zoo")
BASELINES = ["data-parallel", "megatron", "grid"]
BEGIN, END = "<!-- quality-table:begin -->", "<!-- quality-table:end -->"


def find_exe(given):
    if given:
        return given
    if os.environ.get("RECSEARCH"):
        return os.environ["RECSEARCH"]
    for c in sorted(glob.glob(os.path.join(ROOT, "build*", "tools", "recsearch", "recsearch"))):
        if os.access(c, os.X_OK):
            return c
    sys.exit("quality_report: no recsearch executable; build it or pass --recsearch")


def cluster_args(m):
    return ["--mesh", m["mesh"]] if "mesh" in m else ["--devices", str(m["devices"])]


# The operator level: ilp and exhaustive prove optimality over the
# operators' strategies at one training setting under the additive model
# (docs/cost-model.md, Training), so the table compares every algorithm
# there: no recomputation, ZeRO 0, one microbatch, no overlap.
OPERATOR_LEVEL = ["--recompute", "none", "--zero", "0", "--microbatches", "1"]


def compare(exe, m, ilp_limit, level_args):
    graph = os.path.join(ZOO, m["name"] + ".json")
    if not os.path.exists(graph):
        subprocess.run([exe, "gen"] + m["gen"] + ["-o", graph], check=True)
    cmd = [exe, "compare", graph] + cluster_args(m) + ["--format", "json",
                                                      "--ilp-time-limit", str(ilp_limit)]
    cmd += level_args
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("quality_report: %s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr))
    doc = json.loads(p.stdout)
    doc["wall_s"] = time.time() - t0
    doc["command"] = "recsearch compare data/graphs/zoo/%s.json %s" % (
        m["name"], " ".join(cluster_args(m) + [os.path.basename(x) for x in level_args]))
    return doc


def cell(r, rec):
    if r is None:
        return "-"
    if r["status"] != "ok":
        return r["status"]
    return "%.3f" % (r["step_time_s"] / rec) if rec else "%.4g s" % r["step_time_s"]


def ilp_note(r):
    if r is None:
        return "not built"
    if r["status"] == "skipped":
        return "too large" if "too large" in r.get("note", "") else "skipped"
    if r["status"] != "ok":
        return r["status"]
    note = r.get("note", "")
    restricted = note.startswith("restricted")
    if "time limit" in note:
        return "restricted, time limit" if restricted else "time limit"
    if restricted:
        return "restricted, solved"
    return note or "ok"


def report(models, docs):
    lines = ["| model | devices | ops | rec step (s) | rec mem (GiB) | data-parallel | megatron "
             "| grid | ilp | ilp status | rec search (s) | ilp search (s) | ilp/rec search |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    gaps_ilp, gaps_base, short = [], [], []
    for m, d in zip(models, docs):
        rows = {r["algorithm"]: r for r in d["results"]}
        rec = rows.get("rec")
        rec_ok = rec is not None and rec["status"] == "ok"
        rec_step = rec["step_time_s"] if rec_ok else None
        ilp = rows.get("ilp")
        ilp_ok = ilp is not None and ilp["status"] == "ok"
        ratio = (ilp["search_time_s"] / rec["search_time_s"]) if ilp_ok and rec_ok else None
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            m["name"], m.get("mesh", str(m["devices"])), d["operators"],
            "%.4g" % rec_step if rec_ok else rec["status"],
            "%.1f" % (rec["memory_per_device_bytes"] / 2**30) if rec_ok else "-",
            cell(rows.get("data-parallel"), rec_step), cell(rows.get("megatron"), rec_step),
            cell(rows.get("grid"), rec_step), cell(ilp, rec_step), ilp_note(ilp),
            "%.3g" % rec["search_time_s"] if rec_ok else "-",
            "%.3g" % ilp["search_time_s"] if ilp_ok else "-",
            "%.3g" % ratio if ratio else "-"))
        if rec_ok and ilp_ok:
            gaps_ilp.append((rec_step / ilp["step_time_s"] - 1, m["name"], ilp_note(ilp)))
        base = [rows[b]["step_time_s"] for b in BASELINES if b in rows and rows[b]["status"] == "ok"]
        if base:
            if rec_ok:
                gaps_base.append((rec_step / min(base) - 1, m["name"]))
            else:
                short.append("%s: rec found no plan, a baseline did" % m["name"])
    out = "\n".join(lines) + "\n\n"
    if gaps_ilp:
        worst = max(gaps_ilp)
        over = [g for g in gaps_ilp if g[0] > 0.05]
        out += ("rec vs ilp, on the %d models where ilp returned a plan: worst rec/ilp - 1 = "
                "%+.2f%% (%s, ilp %s); %s.\n" % (
                    len(gaps_ilp), 100 * worst[0], worst[1], worst[2],
                    "all within 5%" if not over else "over 5% on " +
                    ", ".join("%s (%+.1f%%)" % (g[1], 100 * g[0]) for g in over)))
    if gaps_base:
        worst = max(gaps_base)
        over = [g for g in gaps_base if g[0] > 0.02]
        out += ("rec vs the best of data-parallel / megatron / grid, on the %d models where one "
                "fits: worst rec/best - 1 = %+.2f%% (%s); %s.\n" % (
                    len(gaps_base), 100 * worst[0], worst[1],
                    "within 2% everywhere" if not over else "more than 2% worse on " +
                    ", ".join("%s (%+.1f%%)" % (g[1], 100 * g[0]) for g in over)))
    for s in short:
        out += s + "\n"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recsearch")
    ap.add_argument("--ilp-time-limit", type=float, default=60)
    ap.add_argument("--models", help="comma-separated subset of the zoo")
    ap.add_argument("--output", help="markdown file (default: stdout)")
    ap.add_argument("--doc", help="replace the marked table in this markdown file "
                    "(docs/quality.md)")
    ap.add_argument("--json", help="also write the raw compare results here")
    ap.add_argument("--level", choices=["operator", "training"], default="operator",
                    help="operator (default): every algorithm at no recomputation, ZeRO 0, one "
                    "microbatch and no overlap, where ilp's optimum is proven; training: the "
                    "settings left to the searches")
    a = ap.parse_args()
    exe = find_exe(a.recsearch)
    level_args = []
    if a.level == "operator":
        cost = os.path.join(tempfile.mkdtemp(prefix="quality_report"), "serial.json")
        with open(cost, "w") as f:
            json.dump({"overlap": False}, f)
        level_args = OPERATOR_LEVEL + ["--cost", cost]
    with open(os.path.join(ZOO, "zoo.json")) as f:
        models = json.load(f)["models"]
    if a.models:
        want = a.models.split(",")
        models = [m for m in models if m["name"] in want]
    docs = []
    for m in models:
        print("quality_report: %s on %s devices..." % (m["name"], m["devices"]),
              file=sys.stderr, flush=True)
        docs.append(compare(exe, m, a.ilp_time_limit, level_args))
    text = report(models, docs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(docs, f, indent=1)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    if a.doc:
        with open(a.doc) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            sys.exit("quality_report: %s lacks the markers %s ... %s" % (a.doc, BEGIN, END))
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(a.doc, "w") as f:
            f.write(head + BEGIN + "\n" + text + END + tail)
    if not a.output and not a.doc:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
