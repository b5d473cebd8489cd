#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `recsearch import` and `recsearch search MODEL.onnx`.

Run by meson as `cli_onnx_test.py RECSEARCH_EXE`; models come from
$RECSEARCH_ONNX_MODELS (written by tools/onnx/make_test_models.py). Checks
values (shapes, operator types, plans), exit codes (0 ok, 1 bad model,
2 usage) and that messages name the file, the node and the problem.
Standard library only.
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import cli_run  # noqa: E402  (tests/support: runs the tool)

EXE = sys.argv[1]
MODELS = os.environ.get("RECSEARCH_ONNX_MODELS") or os.path.join(os.path.dirname(__file__), "models")
FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg, flush=True)
    return bool(cond)


def run(args, expect, stdin=None):
    r = cli_run.run(EXE, args, stdin=stdin, timeout=600)
    out, err = r.out, r.err
    check(r.rc == expect, "recsearch %s -> %d, expected %d\n%s" % (" ".join(args), r.rc, expect, err[-1500:]))
    check("internal error" not in err, "internal error: %s" % err)
    return out, err


def model(name):
    return os.path.join(MODELS, name + ".onnx")


def shapes(graph):
    return {t["name"]: t["shape"] for t in graph["tensors"]}


def main():
    tmp = tempfile.mkdtemp(prefix="recsearch-onnx-")

    # import -> graph JSON with the shapes worked out by hand.
    out, err = run(["import", model("mlp_opset13"), "--dim", "N=64"], 0)
    g = json.loads(out)
    s = shapes(g)
    check(s.get("x") == [64, 256] and s.get("y") == [64, 10], "mlp shapes: %s" % s)
    check(err == "", "mlp import printed: %s" % err)
    types = [o["type"] for o in g["operators"]]
    check(types == ["MatMul", "Add", "ReLU", "MatMul", "Add", "Softmax"], "mlp types %s" % types)
    # The written graph validates and searches like the model itself.
    gpath = os.path.join(tmp, "convnet.json")
    run(["import", model("convnet_opset11"), "-o", gpath], 0)
    out, _ = run(["validate", gpath], 0)
    check("11 operators" in out, "validate: %s" % out)
    p1, _ = run(["search", gpath, "--mesh", "2x2"], 0)
    p2, _ = run(["search", model("convnet_opset11"), "--mesh", "2x2"], 0)
    a, b = json.loads(p1), json.loads(p2)
    check([o["cuts"] for o in a["operators"]] == [o["cuts"] for o in b["operators"]],
          "search of the .onnx and of its imported graph differ")
    check(a["summary"]["step_time_s"] == b["summary"]["step_time_s"], "step times differ")
    # stdin.
    with open(model("transformer_block_opset17"), "rb") as f:
        data = f.read()
    out, _ = run(["import", "-"], 0, stdin=data)
    check(shapes(json.loads(out)).get("scores") == [2, 4, 16, 16], "stdin import")

    # Warnings name the replicated nodes; -q silences them.
    _, err = run(["import", model("shapes_opset13"), "--dim", "batch=2", "--dim", "seq=5"], 0)
    check("'topk' (TopK)" in err and "'conv1d' (Conv)" in err and "replicated" in err, "warnings: %s" % err)
    _, err = run(["import", model("shapes_opset13"), "--dim", "batch=2", "--dim", "seq=5", "-q"], 0)
    check(err == "", "-q still warns: %s" % err)

    # Bad models: exit 1, the message names file, node and problem.
    _, err = run(["import", model("bad_conv")], 1)
    check("bad_conv.onnx" in err and "/graph/node/1" in err and "'conv_bad' (Conv)" in err and "channels" in err,
          "bad conv message: %s" % err)
    _, err = run(["search", model("dangling_input"), "--devices", "2"], 1)
    check("'add_ghost'" in err and "'ghost'" in err, "dangling message: %s" % err)
    _, err = run(["import", model("mlp_opset13")], 1)
    check("'N'" in err and "--dim N=" in err, "symbolic dim message: %s" % err)
    cut = os.path.join(tmp, "cut.onnx")
    with open(cut, "wb") as f:
        f.write(data[: len(data) // 3])
    _, err = run(["import", cut], 1)
    check("cut.onnx" in err and "not a valid ONNX model" in err, "truncated message: %s" % err)
    _, err = run(["import", os.path.join(tmp, "missing.onnx")], 1)
    check("missing.onnx" in err, "missing file message: %s" % err)

    # Usage errors: exit 2.
    run(["import", model("mlp_opset13"), "--dim", "N"], 2)
    run(["import", model("mlp_opset13"), "--dim", "N=0"], 2)
    run(["import"], 2)

    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("onnx cli: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
