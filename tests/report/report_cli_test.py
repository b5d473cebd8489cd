#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`recsearch show` end to end: the HTML report opened in a real headless
browser (Debian's chromium), the DOT report rendered by Graphviz.

    report_cli_test.py RECSEARCH_EXE browser|dot|errors

A plan is searched for the GPT-2 block on 64 devices (tensor parallelism,
so there are layout redistributions), evaluated with `recsearch eval`, and
drawn with `recsearch show`. The browser case reads the DOM after the
page's scripts ran and checks it against the eval output: every operator
row, the summary figures, every redistribution, the drawn graph. Exit 77
(skip) only when chromium or dot is not installed or cannot start.
Standard library only.
"""

import html.parser
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import cli_run  # noqa: E402  (tests/support: runs the tool)

EXE, CASE = sys.argv[1], sys.argv[2]
DATA = os.environ.get("RECSEARCH_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", "data")
GRAPH = os.path.join(DATA, "graphs", "gpt2_block.json")
SKIP = 77
FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return bool(cond)


def run(args):
    r = cli_run.run(EXE, args, timeout=600)
    if r.rc != 0:
        print("recsearch %s -> %d\n%s" % (" ".join(args), r.rc, r.err))
        sys.exit(1)
    return r.out


def same(a, b):
    return a == b or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0))


def layout_pairs(ev):
    return {(r["tensor"], r["to"]) for r in ev["redistributions"] if r["reason"] == "layout"}


class Dom(html.parser.HTMLParser):
    """Elements with their attributes, each knowing its ancestors' ids."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "col"}

    def __init__(self):
        super().__init__()
        self.stack = []
        self.elements = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        ids = [e["attrs"].get("id") for e in self.stack if e["attrs"].get("id")]
        e = {"tag": tag, "attrs": a, "within": ids, "text": ""}
        self.elements.append(e)
        if tag not in self.VOID:
            self.stack.append(e)

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i]["tag"] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        for e in self.stack:
            e["text"] += data

    def find(self, tag=None, within=None, **attrs):
        out = []
        for e in self.elements:
            if tag and e["tag"] != tag:
                continue
            if within and within not in e["within"]:
                continue
            if all(e["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(e)
        return out


def has_class(e, c):
    return c in (e["attrs"].get("class") or "").split()


def plan_mesh(plan_path):
    return json.load(open(plan_path))["mesh"]["axes"]


def chromium_dom(tmp, page):
    """The page's DOM after its scripts ran in headless Chromium, or SKIP
    when Chromium is missing or cannot start."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("chromium is not installed (tools/install-deps.sh installs it): skipped")
        return SKIP
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--user-data-dir=" + os.path.join(tmp, "profile"), "--virtual-time-budget=5000",
           "--dump-dom", "file://" + page]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        print("chromium cannot start (%s): skipped" % e)
        return SKIP
    if "<html" not in p.stdout:
        print("chromium cannot start (exit %d): %s\nskipped" % (p.returncode, p.stderr[-2000:]))
        return SKIP
    dom = Dom()
    dom.feed(p.stdout)
    return dom


def check_mesh_picture(dom, levels):
    """The device-mesh section: one box per drawn level copy, one table row
    per cluster level naming its bandwidth and the plan's axes on it."""
    rows = [e for e in dom.find("tr", within="mesh-levels") if e["attrs"].get("data-level")]
    check([r["attrs"]["data-level"] for r in rows] == [l["name"] for l in levels],
          "mesh table levels %s" % [r["attrs"].get("data-level") for r in rows])
    for r, l in zip(rows, levels):
        check(("%g GB/s" % l["bandwidth_GBps"]) in r["text"], "mesh row %s: %r" % (l["name"], r["text"]))
    boxes = dom.find("rect", within="mesh-svg")
    check(any(has_class(b, "lvl") and b["attrs"].get("data-level") == levels[0]["name"] for b in boxes),
          "no box of level %s in the mesh picture" % levels[0]["name"])
    devices = [b for b in boxes if has_class(b, "dev")]
    expect = 1
    for l in levels:
        expect *= min(l["size"], 8) - (1 if l["size"] > 8 else 0)
    check(len(devices) == expect, "mesh picture: %d device cells, expected %d" % (len(devices), expect))


def browser(tmp, plan_path, ev):
    page = os.path.join(tmp, "plan.html")
    run(["show", plan_path, "--graph", GRAPH, "--html", page])
    dom = chromium_dom(tmp, page)
    if dom == SKIP:
        return SKIP

    status = dom.find(id="status")
    check(status and status[0]["attrs"].get("data-state") == "ready",
          "the page's script did not finish (status %s)" % (status and status[0]["attrs"]))

    plan = json.load(open(plan_path))
    names = [o["name"] for o in plan["operators"]]
    S = ev["summary"]
    # The drawing wraps into bands as wide as its pane (at least four layers).
    svg = dom.find("svg", id="graph-svg")
    if check(len(svg) == 1, "no graph drawing"):
        a = svg[0]["attrs"]
        pane, k = float(a.get("data-pane", 0)), int(a.get("data-layers-per-band", 0))
        check(k >= 4 and float(a["width"]) <= max(pane, k * 190 + 60),
              "the graph (%s px wide, %d layers per band) overflows its %g px pane" %
              (a["width"], k, pane))
    # Summary cards.
    for key in ["step_time_s", "compute_s", "communication_s", "memory_per_device_bytes",
                "parameter_bytes", "activation_bytes"]:
        card = dom.find("div", within="summary", data_key=key)
        if check(len(card) == 1, "summary card %s missing" % key):
            check(same(float(card[0]["attrs"]["data-value"]), S[key]),
                  "summary %s: page %s, eval %s" % (key, card[0]["attrs"]["data-value"], S[key]))
    # Operator rows: one per operator; their costs add up to eval's totals.
    rows = dom.find("tr", within="operators")
    rows = [r for r in rows if "data-op" in r["attrs"]]
    check(sorted(r["attrs"]["data-op"] for r in rows) == sorted(names),
          "operator rows %d, plan has %d operators" % (len(rows), len(names)))
    compute = sum(float(e["attrs"]["data-value"]) for e in dom.find("td", within="operators", data_col="compute_s"))
    comm = sum(float(e["attrs"]["data-value"]) for e in dom.find("td", within="operators", data_col="communication_s"))
    share = sum(float(e["attrs"]["data-value"]) for e in dom.find("td", within="operators", data_col="share"))
    check(math.isclose(compute, S["compute_s"], rel_tol=1e-9), "compute column sums to %r, eval %r" % (compute, S["compute_s"]))
    check(math.isclose(comm, S["communication_s"], rel_tol=1e-9), "communication column sums to %r, eval %r" % (comm, S["communication_s"]))
    check(math.isclose(share, 1.0, rel_tol=1e-9), "shares sum to %r" % share)
    parts = 0.0
    for col in ["layout_s", "gradient_s", "halo_s", "output_s"]:
        parts += sum(float(e["attrs"]["data-value"]) for e in dom.find("td", within="operators", data_col=col))
    check(math.isclose(parts, S["communication_s"], rel_tol=1e-9), "breakdown sums to %r" % parts)
    # Redistributions: eval's, the costliest first (issue 18, item 9).
    rrows = [r for r in dom.find("tr", within="redistributions") if (r["attrs"].get("id") or "").startswith("redist-")]
    check(len(rrows) == len(ev["redistributions"]), "redistribution rows %d, eval %d" % (len(rrows), len(ev["redistributions"])))
    nbytes = [float(e["attrs"]["data-value"]) for e in dom.find("td", within="redistributions", data_col="bytes")]
    nsecs = [float(e["attrs"]["data-value"]) for e in dom.find("td", within="redistributions", data_col="seconds")]
    by_time = sorted(ev["redistributions"], key=lambda r: -r["seconds"])
    check(len(nbytes) == len(ev["redistributions"]) and all(
        same(b, r["bytes"]) and same(s, r["seconds"]) for b, s, r in zip(nbytes, nsecs, by_time)),
        "redistribution bytes/seconds differ from eval's, sorted by time")
    check(all(a >= b for a, b in zip(nsecs, nsecs[1:])), "redistributions not sorted by time")
    # The communication chart: one bar per reason x collective x level,
    # costliest first, adding up to the communication time.
    bars = [e for e in dom.find("div", within="comm-chart") if has_class(e, "crow")]
    groups = {}
    for r in ev["redistributions"]:
        level = next(a["level"] for a in plan_mesh(plan_path) if a["name"] == r["axis"])
        groups[(r["reason"], r["collective"], level)] = groups.get((r["reason"], r["collective"], level), 0.0) + r["seconds"]
    secs = [float(b["attrs"]["data-seconds"]) for b in bars]
    check(len(bars) == len(groups), "comm chart bars %d, groups %d" % (len(bars), len(groups)))
    check(sorted(secs, reverse=True) == secs, "comm chart not sorted")
    check(math.isclose(sum(secs), S["communication_s"], rel_tol=1e-9), "comm chart sums to %r" % sum(secs))
    # Graph: a node per operator, the redistributed edges in red.
    nodes = [e for e in dom.find("g", within="graph-wrap") if has_class(e, "op")]
    check(sorted(e["attrs"]["data-op"] for e in nodes) == sorted(names), "graph has %d nodes" % len(nodes))
    # Edges run from a producer to a consumer: a graph input's moves (the
    # data or a weight turned for its users) have none to draw.
    moved = {e["attrs"]["data-tensor"] for e in dom.find("path", within="graph-wrap") if has_class(e, "moved")}
    with open(GRAPH) as f:
        produced = {t for o in json.load(f)["operators"] for t in o["outputs"]}
    drawn = {t for t, _ in layout_pairs(ev) if t in produced}
    check(len(drawn) > 0, "test setup: the plan has no layout redistribution between operators")
    check(moved == drawn, "red edges %s, eval layout moves between operators %s" % (sorted(moved), sorted(drawn)))
    # Their tooltips name the collectives, levels and sizes.
    for e in dom.find("path", within="graph-wrap"):
        if has_class(e, "moved"):
            check(re.search(r"redistributed: (forward|backward) (all_gather|reduce_scatter|all_reduce|all_to_all|halo) "
                            r"on \S+ \(c\d+\) [0-9.]+ MiB", e["text"]), "edge tooltip: %r" % e["text"])
    # Legend: one entry per output layout class (DP / TP / mixed on the
    # named mesh), the class of each node from its output's mesh_sharding.
    legend = [e for e in dom.find("span", within="legend") if has_class(e, "legend-item")]
    names = {int(e["attrs"]["data-class"]): e["text"].rsplit(" (", 1)[0] for e in legend}
    check(0 < len(legend) <= 12 and len({int(n["attrs"]["data-class"]) for n in nodes}) == len(legend),
          "legend %d entries for %d node classes" % (len(legend), len({n["attrs"]["data-class"] for n in nodes})))
    check(all(re.match(r"^(DP |TP |replicated$|other$)", n) for n in names.values()),
          "legend names: %s" % sorted(names.values()))
    graph = json.load(open(GRAPH))
    tensors = {t["name"]: t for t in plan["tensors"]}
    by_name = {n["attrs"]["data-op"]: n for n in nodes}
    # DP names the batch dim's mesh dims; TP the others' and the partial
    # sums', runs of one level merged into one name (checked by prefix).
    checked = 0
    for o in graph["operators"]:
        t = tensors[o["outputs"][0]]
        dp = t["mesh_sharding"][0] if t["mesh_sharding"] else []
        rest = [a for d in t["mesh_sharding"][1:] for a in d] + t.get("mesh_partial", [])
        got = names.get(int(by_name[o["name"]]["attrs"]["data-class"]))
        if not rest:
            want = "DP " + ",".join(dp) if dp else "replicated"
            ok = got in (want, "other")
        else:
            want = ("DP " + ",".join(dp) + " + " if dp else "") + "TP "
            ok = got == "other" or (got is not None and got.startswith(want) and len(got) > len(want))
        check(ok, "%s: layout class %s, output says %s" % (o["name"], got, want))
        checked += 1
    check(checked == len(graph["operators"]), "layout classes checked for %d operators" % checked)
    # Memory legend: parameters, gradients, optimizer state, activations.
    mleg = {e["attrs"]["data-key"]: float(e["attrs"]["data-value"]) for e in dom.find("span", within="memory-legend")
            if has_class(e, "memory-legend-item")}
    check(set(mleg) == {"weights", "gradient_bytes", "optimizer_bytes", "activation_bytes"}, "memory legend %s" % mleg)
    check(math.isclose(sum(mleg.values()), S["memory_per_device_bytes"], rel_tol=1e-9), "memory legend sums to %r" % sum(mleg.values()))
    mem = dom.find("p", id="memory-text")
    check(mem and same(float(mem[0]["attrs"]["data-used"]), S["memory_per_device_bytes"]), "memory text")
    check_mesh_picture(dom, json.load(open(plan_path))["cluster"]["levels"])
    return 0


def fold(tmp, plan_path, ev):
    """A GPT of more than 5,000 operators (issue 18, item 9): the page draws
    its repeated block once (x N) with the operators around it, carries no
    more than 5,000 operators, and lists the costliest collectives only; the
    mesh picture draws 2 x 4 devices."""
    exe_graph = os.path.join(tmp, "gpt.json")
    run(["gen", "gpt", "--layers", "160", "--hidden", "256", "--heads", "8", "--seq", "128",
         "--vocab", "1024", "--batch", "16", "-o", exe_graph])
    big_plan = os.path.join(tmp, "gpt.plan.json")
    run(["search", exe_graph, "--algo", "megatron", "--mesh", "2x4", "-q", "-o", big_plan])
    page = os.path.join(tmp, "gpt.html")
    run(["show", big_plan, "--graph", exe_graph, "--html", page])
    text = open(page, encoding="utf-8").read()
    start = text.index('id="plan-data">') + len('id="plan-data">')
    D = json.loads(text[start:text.index("</script>", start)])
    F = D.get("fold")
    if not check(F is not None, "no fold in the page of %d operators" % D["operator_count"]):
        return 1
    check(D["operator_count"] > 5000 and len(D["operators"]) <= 5000,
          "%d operators carried of %d" % (len(D["operators"]), D["operator_count"]))
    outside = D["operator_count"] - F["period"] * F["repeats"]
    check(F["repeats"] >= 150 and len(D["operators"]) == outside + F["period"] * F["copies"],
          "fold %s, %d operators carried" % (F, len(D["operators"])))
    check(len(D["redistributions"]) <= 2000 and D["redistribution_count"] >= len(D["redistributions"]),
          "%d of %d redistributions listed" % (len(D["redistributions"]), D["redistribution_count"]))
    dom = chromium_dom(tmp, page)
    if dom == SKIP:
        return SKIP
    status = dom.find(id="status")
    check(status and status[0]["attrs"].get("data-state") == "ready",
          "the folded page's script did not finish (status %s)" % (status and status[0]["attrs"]))
    nodes = [e for e in dom.find("g", within="graph-svg") if has_class(e, "op")]
    check(len(nodes) == outside + F["period"],
          "folded drawing: %d nodes, expected %d" % (len(nodes), outside + F["period"]))
    note = dom.find(id="fold-note")
    check(note and ("\u00d7%d" % F["repeats"]) in note[0]["text"], "fold note %s" % (note and note[0]["text"]))
    check(dom.find("button", id="fold-toggle"), "no expand button")
    nxt = [e for e in dom.find("path", within="graph-svg") if has_class(e, "next")]
    check(nxt, "no edge into the next copy of the block")
    check_mesh_picture(dom, json.load(open(big_plan))["cluster"]["levels"])
    return 0


def dot(tmp, plan_path, ev):
    exe = shutil.which("dot")
    if not exe:
        print("graphviz (dot) is not installed (tools/install-deps.sh installs it): skipped")
        return SKIP
    path = os.path.join(tmp, "plan.dot")
    run(["show", plan_path, "--graph", GRAPH, "--dot", path])
    p = subprocess.run([exe, "-Tsvg", path], capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0 and p.stderr.strip() == "", "dot -Tsvg failed: %s" % p.stderr[-2000:]):
        return 1
    svg = p.stdout
    plan = json.load(open(plan_path))
    for i in range(len(plan["operators"])):
        check("<title>op%d</title>" % i in svg, "operator node op%d missing from the SVG" % i)
    red = svg.count('stroke="#d62728"')
    # Each red edge draws its line and its arrow head.
    check(red == 2 * len(layout_pairs(ev)), "red strokes %d, layout moves %d" % (red, len(layout_pairs(ev))))
    return dot_large(tmp, exe)


def dot_large(tmp, exe):
    """BERT-large: by default the repeated block is drawn once, and Graphviz
    renders it within a minute; --whole-graph writes every operator, each
    copy of the block in a cluster of its own (not rendered: too large)."""
    bert = os.path.join(DATA, "graphs", "bert_large.json")
    plan_path = os.path.join(tmp, "bert.plan.json")
    run(["search", bert, "--mesh", "16x8", "-o", plan_path])
    n = len(json.load(open(plan_path))["operators"])
    path = os.path.join(tmp, "bert.dot")
    run(["show", plan_path, "--graph", bert, "--dot", path])
    text = open(path).read()
    nodes = text.count(" [label=") - text.count("legend") - text.count(" -> ") - text.count("[shape=ellipse")
    check(0 < nodes < n / 4, "folded DOT draws %d of %d operators" % (nodes, n))
    check("subgraph cluster_block0 {" in text and "subgraph cluster_block1 {" not in text,
          "folded DOT: one block cluster")
    try:
        p = subprocess.run([exe, "-Tsvg", path], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "<svg" in p.stdout, "dot -Tsvg of folded BERT: %s" % p.stderr[-2000:])
    except subprocess.TimeoutExpired:
        check(False, "dot -Tsvg of folded BERT took over a minute")
    whole = os.path.join(tmp, "bert_whole.dot")
    run(["show", plan_path, "--graph", bert, "--dot", whole, "--whole-graph"])
    text = open(whole).read()
    for i in range(n):
        if "  op%d [label=" % i not in text:
            check(False, "--whole-graph lacks op%d" % i)
            break
    check(text.count("subgraph cluster_block") >= 3, "--whole-graph: a cluster per block")
    return 0


def errors(tmp, plan_path, ev):
    """Bad input exits 1 naming the file and path; bad usage exits 2."""
    def expect(args, code, *parts):
        p = subprocess.run([EXE] + args, capture_output=True, text=True, timeout=300)
        check(p.returncode == code, "recsearch %s -> %d, expected %d: %s" % (" ".join(args), p.returncode, code, p.stderr))
        for part in parts:
            check(part in p.stderr, "message lacks %r: %s" % (part, p.stderr))
    ffn = os.path.join(DATA, "graphs", "ffn.json")
    out = os.path.join(tmp, "x.html")
    expect(["show", plan_path, "--graph", ffn, "--html", out], 1, plan_path, "/operators/0", "unknown operator")
    expect(["show", os.path.join(tmp, "missing.json"), "--graph", GRAPH, "--html", out], 1, "missing.json")
    expect(["show", plan_path, "--graph", GRAPH], 2, "--html")
    expect(["show", plan_path, "--html", out], 2)
    expect(["show", plan_path, "--graph", GRAPH, "--html", "-", "--dot", "-"], 2)
    check(not os.path.exists(out), "a failed show wrote its output")
    return 0


def main():
    tmp = tempfile.mkdtemp(prefix="recsearch-report-")
    plan_path = os.path.join(tmp, "plan.json")
    run(["search", GRAPH, "--devices", "64", "-o", plan_path])
    ev = json.loads(run(["eval", GRAPH, plan_path]))
    rc = {"browser": browser, "dot": dot, "errors": errors, "fold": fold}[CASE](tmp, plan_path, ev)
    shutil.rmtree(tmp, ignore_errors=True)
    if rc == SKIP:
        return SKIP
    if FAILURES or rc:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("report %s: all checks passed" % CASE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
