#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of the ctypes binding (tools/python/recsearch/) over the C API.

Environment: RECSEARCH_LIBRARY (the shared library), RECSEARCH_DATA (data/),
PYTHONPATH including tools/python, and RECSEARCH_CLI (optional: the
`recsearch` tool, built on the static library, whose plans the binding's
must equal). Standard library only.

Every bundled graph is rebuilt call by call from its parsed JSON (tensors,
operators, attributes by Python type, pinned strategies, allowed loops) and
must plan exactly as the graph read from the same JSON; plans must match
the CLI's file (strategies, cuts, shardings, step time) and evaluate back
to their own step time.
"""

import json
import os
import subprocess
import sys
import tempfile

import recsearch

DATA = os.environ.get("RECSEARCH_DATA") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "data")
CLI = os.environ.get("RECSEARCH_CLI")
FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return bool(cond)


def close(a, b, rel=1e-12):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def build_from_dict(doc):
    """The graph of a parsed recsearch.graph document, made by calls."""
    g = recsearch.Graph(doc.get("name"))
    for t in doc["tensors"]:
        kind = t.get("kind")
        g.add_tensor(t["name"], t["shape"], t.get("dtype", "f32"),
                     None if kind in (None, "activation") else kind)
    for o in doc["operators"]:
        attrs = dict(o.get("attrs", {}))
        if "einsum" in o:
            attrs["einsum"] = o["einsum"]
        g.add_operator(o["name"], o["type"], o["inputs"], o["outputs"], attrs=attrs,
                       strategy=o.get("strategy"), allowed=o.get("allowed"))
    return g


def fingerprint(plan):
    ops = plan.operators
    return ([plan.strategy(i) for i in range(len(ops))], [plan.cuts(i) for i in range(len(ops))],
            [plan.sharding(i) for i in range(len(plan.tensors))], plan.summary["step_time_s"],
            plan.summary["memory_per_device_bytes"])


def test_build_equals_json():
    cluster = recsearch.Cluster.mesh([2, 4])
    for rel in ["ffn.json", "gpt2_block.json", "resnet50.json", "tiny/convnet.json",
                "tiny/embedding.json"]:
        path = os.path.join(DATA, "graphs", rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        doc = json.loads(text)
        read = recsearch.Graph.from_json(text, rel)
        built = build_from_dict(doc)
        check(built.num_operators == len(doc["operators"]), rel + ": operator count")
        check(built.to_json() == read.to_json(), rel + ": built graph writes a different file")
        for mode in ("train", "infer"):
            a = recsearch.search(built, cluster, mode=mode, threads=1)
            b = recsearch.search(read, cluster, mode=mode)
            check(fingerprint(a) == fingerprint(b), "%s %s: built and read plans differ" % (rel, mode))


def test_against_cli():
    if not CLI:
        print("no CLI: skipping the comparison with `recsearch search`")
        return
    for rel, mesh in [("gpt2_block.json", [4, 8]), ("ffn.json", [6]), ("resnet50.json", [2, 4])]:
        path = os.path.join(DATA, "graphs", rel)
        mesh_arg = "x".join(str(d) for d in mesh)
        out = subprocess.run([CLI, "search", path, "--mesh", mesh_arg, "-q"], check=True,
                             capture_output=True, text=True).stdout
        cli_plan = json.loads(out)
        plan = recsearch.search(recsearch.Graph.read_file(path), recsearch.Cluster.mesh(mesh))
        axes = [a[0] for a in plan.axes]
        check(axes == [a["name"] for a in cli_plan["mesh"]["axes"]], rel + ": mesh axes")
        check(close(plan.summary["step_time_s"], cli_plan["summary"]["step_time_s"]),
              "%s: step time %r vs CLI %r" % (rel, plan.summary["step_time_s"],
                                              cli_plan["summary"]["step_time_s"]))
        for op in cli_plan["operators"]:
            check(plan.strategy(op["name"]) == op["strategy"],
                  "%s: %s strategy %r vs CLI %r" % (rel, op["name"], plan.strategy(op["name"]),
                                                    op["strategy"]))
            want = [None] * len(axes)
            for axis, dim in op.get("cuts", {}).items():
                want[axes.index(axis)] = dim
            check(plan.cuts(op["name"]) == want, "%s: %s cuts" % (rel, op["name"]))
        for t in cli_plan["tensors"]:
            dims, partial = plan.sharding(t["name"])
            check([[axes[a] for a in d] for d in dims] == t["sharding"],
                  "%s: %s sharding" % (rel, t["name"]))
            check([axes[a] for a in partial] == t.get("partial", []),
                  "%s: %s partial" % (rel, t["name"]))
        # The binding's own plan file is the CLI's, up to the search time.
        mine = json.loads(plan.to_json())
        mine["summary"].pop("search_time_s", None)
        cli_plan["summary"].pop("search_time_s", None)
        check(mine == cli_plan, rel + ": plan JSON differs from the CLI's")


def test_evaluate_roundtrip():
    g = recsearch.Graph.read_file(os.path.join(DATA, "graphs", "gpt2_block.json"))
    with open(os.path.join(DATA, "clusters", "dgx_h100_64x8.json"), encoding="utf-8") as f:
        cluster = recsearch.Cluster.from_json(f.read(), "dgx_h100_64x8.json")
    check(cluster.num_devices == 512, "cluster file: 512 devices")
    plan = recsearch.search(g, cluster, memory_budget_gib=40)
    in_bytes = recsearch.search(g, cluster, memory_budget=40 * 2**30)
    check(in_bytes.summary["step_time_s"] == plan.summary["step_time_s"],
          "memory_budget_gib=40 and memory_budget=40 GiB in bytes differ")
    # A budget in bytes under 1 MiB is taken for GiB given in the wrong unit.
    try:
        recsearch.search(g, cluster, memory_budget=40)
        check(False, "memory_budget=40 (bytes) accepted")
    except ValueError as e:
        check("memory_budget_gib=40" in str(e), "memory_budget=40: %s" % e)
    text = plan.to_json()
    back = recsearch.evaluate(g, text)
    check(close(back.summary["step_time_s"], plan.summary["step_time_s"]),
          "evaluate(written plan) step time")
    comm = sum(r["seconds"] for r in back.redistributions())
    check(close(comm, back.summary["communication_s"], 1e-9), "redistributions sum to comm time")
    check(back.summary["memory_per_device_bytes"] <= 40 * 2**30, "memory budget respected")
    # Evaluating the plan on a slower cluster of the same shape costs more.
    slow = recsearch.Cluster.levels("slow", [("node", 64, 5, 5), ("gpu", 8, 45, 2)])
    on_slow = recsearch.evaluate(g, text, slow)
    check(on_slow.summary["communication_s"] > back.summary["communication_s"],
          "slower links, more communication time")


def test_training_detail():
    """Per-operator recomputation and per-parameter ZeRO stages of a plan file."""
    path = os.path.join(DATA, "graphs", "tiny", "convnet.json")
    with open(path, encoding="utf-8") as f:
        params = [t["name"] for t in json.load(f)["tensors"] if t.get("kind") == "parameter"]
    g = recsearch.Graph.read_file(path)
    cluster = recsearch.Cluster.flat(2)
    plain = recsearch.search(g, cluster)
    ops = plain.operators
    doc = json.loads(plain.to_json())
    doc["training"] = {"recompute": "selective", "zero_stage": 2, "microbatches": 1,
                       "recompute_ops": {ops[0]: "full"}, "zero_params": {params[0]: 3}}
    r = recsearch.evaluate(g, json.dumps(doc), cluster)
    check(r.training["recompute"] == "selective" and r.training["zero_stage"] == 2,
          "plan-wide training settings: %s" % r.training)
    check(r.recompute(ops[0]) == "full", "recompute of %s" % ops[0])
    check(all(r.recompute(o) == "selective" for o in ops[1:]), "recompute of the others")
    check(r.zero_stage(params[0]) == 3, "ZeRO stage of %s" % params[0])
    check(all(r.zero_stage(t) == 2 for t in params[1:]), "ZeRO stage of the others")
    back = json.loads(r.to_json())["training"]
    check(back.get("zero_params") == {params[0]: 3}, "zero_params written back: %s" % back)
    # Each parameter's ZeRO axes are the plan file's, by axis name.
    for t in params:
        check(r.zero_axes(t) == back.get("zero_axes", {}).get(t, []),
              "zero_axes of %s: %s against %s" % (t, r.zero_axes(t), back.get("zero_axes")))
    check(any(r.zero_axes(t) for t in params), "some parameter is ZeRO-sharded: %s" % back)
    try:
        r.zero_stage(next(t for t in r.tensors if t not in params))
        check(False, "ZeRO stage of a tensor that is not a parameter")
    except recsearch.RecsearchError as e:
        check("not a parameter" in str(e), "not a parameter: %s" % e)


def test_errors():
    try:
        recsearch.Graph.from_json('{"format": "recsearch.graph", "version": 1, "tensors": '
                                  '[{"name": "a", "shape": [2]}], "operators": [{"name": "r", '
                                  '"type": "ReLU", "inputs": ["a"], "outputs": ["zz"]}]}',
                                  "bad.json")
        check(False, "unknown tensor accepted")
    except recsearch.RecsearchError as e:
        check(e.status == "bad_input" and e.exit_code == 1 and e.code == 103,
              "unknown tensor: status %s code %s" % (e.status, e.code))
        check("bad.json: /operators/0/outputs/0" in e.message, "path in message: " + e.message)
    try:
        recsearch.Graph.from_json(b"\x00\xff{garbage")
        check(False, "garbage accepted")
    except recsearch.RecsearchError as e:
        check(e.code == 101, "garbage: parse error, got %s" % e.code)
    g = recsearch.Graph("g")
    g.add_tensor("x", [4, 4], "f32", "input")
    for call, code in [(lambda: g.add_tensor("y", [4], "f99"), 201),
                       (lambda: g.add_operator("r", "ReLU", ["x"], ["nope"]), 103),
                       (lambda: recsearch.Cluster.flat(0), 108),
                       (lambda: recsearch.search(g, recsearch.Cluster.flat(2), mode="fast"), 201),
                       (lambda: recsearch.search(g, recsearch.Cluster.flat(2),
                                                 cost={"no_such": 1}), 201)]:
        try:
            call()
            check(False, "expected error %d" % code)
        except recsearch.RecsearchError as e:
            check(e.code == code, "expected error %d, got %d: %s" % (code, e.code, e.message))
    check(recsearch.version().count(".") == 2, "version string")


def main():
    for t in (test_build_equals_json, test_against_cli, test_evaluate_roundtrip,
              test_training_detail, test_errors):
        print("--", t.__name__, flush=True)
        t()
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
