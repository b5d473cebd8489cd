#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of pipelined plans (docs/pipeline.md).

Run by meson as `pipeline_test.py RECSEARCH_EXE`. Standard library only.
`search --stages N` writes a plan file with a "pipeline" section; `eval`
reads it back and reports the same figures; the table shows the stage
strip; a damaged stage is refused with exit 1 naming the file and the JSON
path; `--stages NxV` pins the interleaved schedule; a bad --stages is a
usage error (exit 2). All failures are listed
before the test fails.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

EXE = None
FAILURES = []


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


def main():
    global EXE
    EXE = sys.argv[1]
    tmp = tempfile.mkdtemp()
    graph = os.path.join(tmp, "gpt.json")
    run(["gen", "gpt", "--hidden", "256", "--layers", "8", "--heads", "8", "--seq", "128",
         "--vocab", "1000", "--batch", "16", "-o", graph])
    plan = os.path.join(tmp, "plan.json")
    run(["search", graph, "--mesh", "4x2", "--stages", "4", "-q", "-o", plan])
    with open(plan) as f:
        searched = json.load(f)
    pipe = searched.get("pipeline", {})
    check(pipe.get("device_groups") == 4, "4 device groups: %s" % pipe.get("device_groups"))
    stages = pipe.get("stages", [])
    check(len(stages) == 4, "4 stages")
    check([s.get("devices") for s in stages] == [[0, 2], [2, 4], [4, 6], [6, 8]],
          "stage devices: %s" % [s.get("devices") for s in stages])
    check(all(a["range"][1] == b["range"][0] for a, b in zip(stages, stages[1:])),
          "stages are contiguous")

    # eval reads it back (the cluster travels in the file) and agrees.
    back = run(["eval", graph, plan, "-q"])
    evaluated = json.loads(back.stdout) if back.returncode == 0 else {}
    for key in ("step_time_s", "memory_per_device_bytes", "bubble_fraction"):
        check(close(evaluated.get("summary", {}).get(key, -1), searched["summary"][key]),
              "eval's %s equals the search's" % key)
    table = run(["eval", graph, plan, "-q", "--format", "table"]).stdout
    check("bubble ms" in table and "memory GiB" in table, "the table has the stage strip")
    # The plain plan's layout (issue 18, item 8): the summary before the
    # group rows, then each stage with its own summary and communication.
    check(0 <= table.find("\nstep time ") < table.find("\ngroup ") < table.find("== stage 0"),
          "the pipelined table opens with its summary")
    stages = len(searched["pipeline"]["stages"])
    check(table.count("\n== stage ") == stages and
          table.count("communication by reason, collective and level") == stages,
          "every stage laid out as a plan: %d stages" % stages)
    check("search time" not in table, "eval prints no search time")

    # show: the HTML page of a pipelined plan opens with the stage strip
    # (issue 18, item 9): per stage its operators, group, compute, and its
    # group's memory and bubble, as eval computes them; the graph is the
    # chosen stage's.
    page = os.path.join(tmp, "plan.html")
    run(["show", plan, "--graph", graph, "--html", page, "--stage", "1"])
    with open(page) as f:
        html = f.read()
    m = re.search(r'<script type="application/json" id="plan-data">(.*?)</script>', html, re.S)
    data = json.loads(m.group(1)) if m else {}
    strip = data.get("pipeline", {})
    figures = evaluated.get("pipeline", {}).get("group_figures", [])
    check(len(strip.get("stages", [])) == 4 and strip.get("shown") == 1, "stage strip: %s" % strip)
    for st, ref in zip(strip.get("stages", []), evaluated.get("pipeline", {}).get("stages", [])):
        check(st["first"] == ref["first"] and st["last"] == ref["last"] and st["group"] == ref["group"],
              "strip stage %s vs eval %s" % (st, {k: ref[k] for k in ("first", "last", "group")}))
        fig = figures[ref["group"]] if ref["group"] < len(figures) else {}
        check(close(st["memory_bytes"], fig.get("memory_bytes", -1)) and
              close(st["bubble_s"], fig.get("bubble_s", -1)), "strip memory and bubble: %s" % st)
    check(close(strip.get("bubble_fraction", -1), evaluated["summary"]["bubble_fraction"]),
          "strip bubble fraction")
    stage1 = evaluated.get("pipeline", {}).get("stages", [{}, {}])[1]
    check(len(data.get("operators", [])) == stage1.get("range", [0, 0])[1] - stage1.get("range", [0, 0])[0],
          "the page draws stage 1's operators")
    p = run(["show", plan, "--graph", graph, "--html", page, "--stage", "9"], expect=2)
    check("--stage 9" in p.stderr, "a stage past the last: %s" % p.stderr)

    # A damaged stage: exit 1, the file and the JSON path in the message.
    searched["pipeline"]["stages"][2]["range"][0] += 1
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump(searched, f)
    p = run(["eval", graph, bad, "-q"], expect=1)
    check(bad in p.stderr and "/pipeline/stages/2/" in p.stderr,
          "the error names the file and the stage: %s" % p.stderr)

    p = run(["search", graph, "--mesh", "4x2", "--stages", "many", "-q"], expect=2)
    check("--stages" in p.stderr, "a bad --stages names the option: %s" % p.stderr)
    p = run(["search", graph, "--mesh", "4x2", "--stages", "3", "-q"], expect=2)
    check("do not split" in p.stderr, "3 groups do not split 4 nodes: %s" % p.stderr)
    # NxV pins the interleaved schedule with V stages per group.
    inter = json.loads(run(["search", graph, "--mesh", "4x2", "--stages", "2x2",
                            "--microbatches", "4", "-q"]).stdout).get("pipeline", {})
    check(inter.get("schedule") == "interleaved" and inter.get("virtual_stages") == 2 and
          len(inter.get("stages", [])) == 4 and inter.get("microbatches") == 4,
          "--stages 2x2 pins 2 groups x 2 interleaved stages: %s" %
          {k: inter.get(k) for k in ("schedule", "virtual_stages", "microbatches")})
    p = run(["search", graph, "--mesh", "4x2", "--stages", "2x", "-q"], expect=2)
    check("NxV" in p.stderr, "a bad --stages NxV names the form: %s" % p.stderr)

    # auto never does worse than no stages.
    single = json.loads(run(["search", graph, "--mesh", "4x2", "-q"]).stdout)
    auto = json.loads(run(["search", graph, "--mesh", "4x2", "--stages", "auto", "-q"]).stdout)
    check(auto["summary"]["step_time_s"] <= single["summary"]["step_time_s"] * (1 + 1e-9),
          "--stages auto is at least as fast as no stages")

    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
