#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `recsearch exec` under mpirun (meson suite `exec`).

Each case runs a plan on 2, 4, 6, 7 or 8 MPI ranks (oversubscribed) with
--check: the command itself compares every output and activation with a
one-device run and the bytes each rank sent with the bytes predicted from
the plan, and exits non-zero on any mismatch. This script checks the exit
code and reads the report: which collectives ran (each case must exercise
the redistributions it was written for), and, where the cost model's
per-axis accounting applies exactly (one mesh axis), that the cost model's
forward bytes equal the measured ones. Failure cases check that every rank
ends, non-zero, with a clear message, within bounded time.

Usage: exec_test.py RECSEARCH_BINARY SOURCE_ROOT [CASE ...]
Exit 77 (skipped) when mpirun is absent.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

BIN = None
ROOT = None
TMP = None
FAILURES = []

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           # Containers often forbid the cross-memory attach of the shared-memory transport.
           OMPI_MCA_btl_vader_single_copy_mechanism="none")


def mpirun(n, args, timeout=240):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), BIN, "exec"] + args
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "TIMEOUT", timeout
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


# ---- a graph and plans that exercise every redistribution -----------------

def chain_graph(m, k, n, p):
    """x[m,k] @ w1[k,n] -> GeLU -> @ w2[n,k] -> BiasAdd -> Softmax ->
    Transpose -> @ w3[m,p] -> ReduceSum over dim 0 -> y[p]."""
    t = lambda name, shape, kind=None: dict(name=name, shape=shape, dtype="f32", **({"kind": kind} if kind else {}))
    tensors = [t("x", [m, k], "input"), t("w1", [k, n], "parameter"), t("w2", [n, k], "parameter"),
               t("b2", [k], "parameter"), t("w3", [m, p], "parameter"),
               t("h1", [m, n]), t("h2", [m, n]), t("h3", [m, k]), t("h4", [m, k]), t("h5", [m, k]),
               t("h6", [k, m]), t("h7", [k, p]), t("y", [p])]
    op = lambda name, type_, ins, outs, attrs=None: dict(name=name, type=type_, inputs=ins, outputs=outs,
                                                          **({"attrs": attrs} if attrs else {}))
    ops = [op("mm1", "MatMul", ["x", "w1"], ["h1"]), op("act", "GeLU", ["h1"], ["h2"]),
           op("mm2", "MatMul", ["h2", "w2"], ["h3"]), op("bias", "BiasAdd", ["h3", "b2"], ["h4"]),
           op("sm", "Softmax", ["h4"], ["h5"], {"axis": -1}), op("tr", "Transpose", ["h5"], ["h6"]),
           op("mm3", "MatMul", ["h6", "w3"], ["h7"]),
           op("red", "ReduceSum", ["h7"], ["y"], {"axes": [0], "keepdims": False})]
    return {"format": "recsearch.graph", "version": 1, "name": "chain", "tensors": tensors, "operators": ops}


# Per operator, per mesh axis: the loop that axis cuts (None: replicated).
# One axis: mm1 k (h1 partial) -> act d0: reduce-scatter; mm2 j: all-gather
# of h2; bias d0: all-to-all of h3; sm d0; tr d1 ... see the comments below.
ONE_AXIS = {
    "mm1": ["k"],     # h1 partial
    "act": ["d0"],    # P -> S0: reduce-scatter
    "mm2": ["j"],     # h2 S0 -> R: all-gather; w2 sliced for free (its first use)
    "bias": ["d0"],   # h3 S1 -> S0: all-to-all
    "sm": ["d0"],     # h4 S0 as held
    "tr": ["d0"],     # h5 S0 -> S1 (output dim 0 is input dim 1): all-to-all
    "mm3": [None],    # h6 S0 -> R: all-gather
    "red": ["d0"],    # h7 R -> S0: local slice; y partial -> all-reduce (output)
}
# Two axes: nested sharding, the [c0, c1] -> [c1] reorder, all kinds per axis.
TWO_AXES = {
    "mm1": ["i", "i"],     # h1 dim 0 split by c0 then c1
    "act": ["d1", "d0"],   # dim 0 by c1 only, dim 1 by c0: c1 leaves and comes back
    "mm2": ["k", None],    # c1: all-gather; h3 partial on c0
    "bias": ["d0", "d1"],  # c0: reduce-scatter into dim 0
    "sm": ["d0", "d0"],    # c1: all-to-all dim 1 -> dim 0
    "tr": ["d1", "d0"],    # c1: all-to-all dim 0 -> dim 1
    "mm3": ["k", None],    # c1: all-gather
    "red": ["d1", "d0"],   # c0: reduce-scatter, c1: slice; y partial on c1 -> all-reduce
}
# Partial sums over both axes, reduced hierarchically (reduce-scatter on c1,
# all-reduce on c0 on the piece, all-gather on c1): per axis exactly what
# the cost model counts, so measured bytes equal the model's on 2 axes too.
HIERARCHICAL = {
    "mm1": ["k", "k"],
    "act": [None, None],
    "mm2": ["i", "i"],
    "bias": ["d0", "d0"],
    "sm": ["d0", "d0"],
    "tr": ["d1", "d1"],
    "mm3": ["k", "k"],
    "red": [None, None],
}
THREE_AXES = {
    "mm1": ["i", "i", "j"],
    "act": ["d1", "d0", "d1"],
    "mm2": ["k", None, "i"],
    "bias": ["d0", "d1", "d0"],
    "sm": ["d0", "d0", None],
    "tr": ["d1", "d0", "d0"],
    "mm3": ["k", None, "j"],
    "red": ["d1", "d0", None],
}


def plan_json(graph, mesh, cuts):
    axes = [{"name": f"c{a}", "size": s} for a, s in enumerate(mesh)]
    ops = [{"name": name, "cuts": [{"axis": f"c{a}", "dim": d} for a, d in enumerate(dims)]}
           for name, dims in cuts.items()]
    n = 1
    for s in mesh:
        n *= s
    return {"format": "recsearch.plan", "version": 1, "graph": graph["name"], "mode": "infer",
            "mesh": {"axes": axes, "devices": n}, "operators": ops}


def write(name, obj):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def report_numbers(out):
    nums = {}
    for key, pat in (("measured", r"measured \(rank 0\)\s+(\d+)"),
                     ("predicted", r"predicted from the plan layouts (\d+)"),
                     ("model", r"cost model forward collectives (\d+)")):
        m = re.search(pat, out)
        nums[key] = int(m.group(1)) if m else None
    m = re.search(r"collectives: all-gather (\d+), all-reduce (\d+), reduce-scatter (\d+), all-to-all (\d+)", out)
    nums["calls"] = tuple(int(x) for x in m.groups()) if m else None
    return nums


def run_ok(label, n, graph_path, plan_path, want_calls=None, model_equal=False, extra=()):
    rc, out, err, secs = mpirun(n, [graph_path, plan_path, "--check", "--timeout", "60"] + list(extra))
    print(f"{label}: {n} ranks, rc {rc}, {secs:.1f} s", flush=True)
    if not check(rc == 0 and "check: passed" in out, f"{label}: rc {rc}\n{out}\n{err}"):
        return
    nums = report_numbers(out)
    check(nums["measured"] == nums["predicted"], f"{label}: measured {nums['measured']} != predicted {nums['predicted']}")
    if want_calls is not None:
        # Every collective kind the case was written for ran.
        names = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all")
        for name, want, got in zip(names, want_calls, nums["calls"]):
            check(got >= want, f"{label}: {name} ran {got} times, expected at least {want}\n{out}")
    if model_equal:
        check(nums["model"] == nums["measured"],
              f"{label}: cost model says {nums['model']} bytes, measured {nums['measured']}\n{out}")
    print(out, end="", flush=True)


def expected_one_axis_bytes(m, k, n, p, ranks):
    """Bytes per rank of ONE_AXIS, counted by hand from the ring formulas
    (f32): reduce-scatter h1, all-gather h2, all-to-all h3 and h5,
    all-gather h6, all-reduce y."""
    q = ranks
    rs_h1 = (q - 1) / q * m * n            # each rank holds all of h1 (partial)
    ag_h2 = (q - 1) * (m * n / q)
    a2a_h3 = (q - 1) / q * (m * k / q)
    a2a_h5 = (q - 1) / q * (m * k / q)
    ag_h6 = (q - 1) * (k * m / q)
    ar_y = 2 * (q - 1) / q * p
    return 4 * (rs_h1 + ag_h2 + a2a_h3 + a2a_h5 + ag_h6 + ar_y)


def case_kinds():
    m, k, n, p = 168, 336, 504, 84  # m, k, n divisible by 2, 3, 4, 6, 7 and 8
    g = chain_graph(m, k, n, p)
    gp = write("chain.json", g)
    for ranks in (2, 7):
        pp = write(f"chain_{ranks}.plan.json", plan_json(g, [ranks], ONE_AXIS))
        run_ok(f"one axis of {ranks}", ranks, gp, pp, want_calls=(2, 1, 1, 2), model_equal=True)
        rc, out, _, _ = mpirun(ranks, [gp, pp])
        nums = report_numbers(out)
        want = expected_one_axis_bytes(m, k, n, p, ranks)
        check(rc == 0 and nums["measured"] is not None and abs(nums["measured"] - want) <= 1,
              f"one axis of {ranks}: measured {nums['measured']} bytes, hand count {want:.0f}")
    for mesh in ([2, 2], [2, 3], [3, 2]):
        pp = write("chain_%s.plan.json" % "x".join(map(str, mesh)), plan_json(g, mesh, TWO_AXES))
        run_ok("two axes " + "x".join(map(str, mesh)), mesh[0] * mesh[1], gp, pp, want_calls=(3, 1, 2, 2))
    for mesh in ([2, 2], [2, 3]):
        pp = write("chain_hier_%s.plan.json" % "x".join(map(str, mesh)), plan_json(g, mesh, HIERARCHICAL))
        run_ok("hierarchical all-reduce " + "x".join(map(str, mesh)), mesh[0] * mesh[1], gp, pp,
               want_calls=(2, 2, 2, 0), model_equal=True)
    pp = write("chain_2x2x2.plan.json", plan_json(g, [2, 2, 2], THREE_AXES))
    run_ok("three axes 2x2x2", 8, gp, pp, want_calls=(1, 1, 1, 1))


def loss_graph(m, k, v, reduction):
    """x[m,k] @ w[k,v] -> logits -> SoftmaxCrossEntropy(logits, labels[m]) -> loss."""
    t = lambda name, shape, kind=None, dtype="f32": dict(name=name, shape=shape, dtype=dtype,
                                                         **({"kind": kind} if kind else {}))
    loss_shape = [m] if reduction == "none" else []
    return {"format": "recsearch.graph", "version": 1, "name": "loss",
            "tensors": [t("x", [m, k], "input"), t("w", [k, v], "parameter"),
                        t("labels", [m], "input", "i64"), t("logits", [m, v]), t("loss", loss_shape)],
            "operators": [dict(name="mm", type="MatMul", inputs=["x", "w"], outputs=["logits"]),
                          dict(name="ce", type="SoftmaxCrossEntropy", inputs=["logits", "labels"],
                               outputs=["loss"], attrs={"reduction": reduction})]}


def case_vocab_parallel():
    """A loss with its class dim cut (vocabulary-parallel, as Megatron-LM
    runs it): on one axis, on the inner axis with the batch on the outer
    one, and on both axes; mean, sum and per-row losses."""
    m, k, v = 12, 24, 60
    for reduction in ("mean", "sum", "none"):
        g = loss_graph(m, k, v, reduction)
        gp = write(f"loss_{reduction}.json", g)
        for label, mesh, cuts in (("2", [2], {"mm": ["j"], "ce": ["c"]}),
                                  ("2x2 batch, class", [2, 2], {"mm": ["i", "j"], "ce": ["b0", "c"]}),
                                  ("2x3 class, class", [2, 3], {"mm": ["j", "j"], "ce": ["c", "c"]})):
            n = 1
            for x in mesh:
                n *= x
            pp = write(f"loss_{reduction}_{n}.plan.json", plan_json(g, mesh, cuts))
            run_ok(f"vocabulary-parallel loss ({reduction}) on {label}", n, gp, pp,
                   want_calls=(1, 1, 0, 0))


def case_bundled():
    """Search plans for the bundled graphs (small variants), run them."""
    graphs = [os.path.join(ROOT, "data/graphs/ffn.json"),
              os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json"),
              os.path.join(ROOT, "tests/exec/graphs/bert_large_small.json"),
              os.path.join(ROOT, "tests/exec/graphs/attention_mix.json")]
    cost = write("no_latency.json", {"count_latency": False})
    for gpath in graphs:
        for ranks, mode in ((2, "infer"), (4, "train"), (6, "infer"), (8, "infer")):
            if "bert" in gpath and ranks not in (4, 8):
                continue
            plan = os.path.join(TMP, f"{os.path.basename(gpath)}.{ranks}.{mode}.plan.json")
            s = subprocess.run([BIN, "search", gpath, "--devices", str(ranks), "--mode", mode, "-q",
                                "--cost", cost, "-o", plan], capture_output=True, text=True)
            if not check(s.returncode == 0, f"search {gpath} {ranks}: {s.stderr}"):
                continue
            run_ok(f"{os.path.basename(gpath)} searched for {ranks} ({mode})", ranks, gpath, plan)


def case_failures():
    m, k, n, p = 168, 336, 504, 84
    g = chain_graph(m, k, n, p)
    gp = write("chain.json", g)
    plan4 = write("chain_fail_2x2.plan.json", plan_json(g, [2, 2], TWO_AXES))

    # Rank count different from the plan's devices: exit 1 before any collective.
    rc, out, err, secs = mpirun(3, [gp, plan4])
    check(rc == 1 and "the plan is for 4 devices but 3 ranks run it" in err,
          f"wrong rank count: rc {rc}\n{err}")

    # A plan that does not match the graph.
    bad = plan_json(g, [2, 2], TWO_AXES)
    bad["operators"][0]["name"] = "no_such_op"
    rc, out, err, secs = mpirun(4, [gp, write("bad_op.plan.json", bad)])
    check(rc == 1 and "no_such_op" in err, f"plan/graph mismatch: rc {rc}\n{err}")
    bad = plan_json(g, [2, 2], TWO_AXES)
    bad["operators"][2]["cuts"][0]["dim"] = "zz"
    rc, out, err, secs = mpirun(4, [gp, write("bad_loop.plan.json", bad)])
    check(rc == 1 and "/operators/2/cuts/0/dim" in err, f"unknown loop: rc {rc}\n{err}")

    # A plan whose stated bytes do not match its cuts.
    plan_file = os.path.join(TMP, "ffn4.plan.json")
    ffn = os.path.join(ROOT, "data/graphs/ffn.json")
    s = subprocess.run([BIN, "search", ffn, "--devices", "4", "--mode", "train", "-q",
                        "-o", plan_file], capture_output=True, text=True)
    check(s.returncode == 0, f"search ffn: {s.stderr}")
    with open(plan_file) as f:
        stated = json.load(f)
    stated.setdefault("redistributions", []).append(
        {"tensor": "x", "from": "dense1.matmul", "to": "relu1", "axis": "c0",
         "collective": "all_gather", "phase": "forward", "bytes": 4096})
    rc, out, err, secs = mpirun(4, [ffn, write("ffn4_bytes.plan.json", stated)])
    check(rc == 1 and "forward bytes per device, but its cuts imply" in err,
          f"stated bytes mismatch: rc {rc}\n{err}")

    # Unsupported operators are named before anything runs: MaxPool's indices
    # output has no kernel. (Convolutions under --train, refused here before
    # they had a backward, now run: case_cnn_train.)
    pool = write("pool_indices.json", {
        "format": "recsearch.graph", "version": 1, "name": "pool_indices",
        "tensors": [dict(name="x", shape=[4, 2, 4, 4], dtype="f32", kind="input"),
                    dict(name="y", shape=[4, 2, 2, 2], dtype="f32"),
                    dict(name="idx", shape=[4, 2, 2, 2], dtype="i64")],
        "operators": [dict(name="pool", type="MaxPool", inputs=["x"], outputs=["y", "idx"],
                           attrs={"kernel_shape": [2, 2]})]})
    pool_plan = write("pool_indices.plan.json", plan_json(json.load(open(pool)), [2], {"pool": ["n"]}))
    rc, out, err, secs = mpirun(2, [pool, pool_plan])
    check(rc == 2 and "cannot be executed" in err and "MaxPool" in err, f"unsupported: rc {rc}\n{err}")

    # A failure on one rank mid-run ends every rank with its code.
    rc, out, err, secs = mpirun(4, [gp, plan4, "--fault", "2:throw:3", "--timeout", "30"], timeout=120)
    check(rc == 4 and "injected failure" in err and secs < 60, f"throw on rank 2: rc {rc}, {secs:.0f} s\n{err}")

    # A rank killed mid-run: mpirun ends the others.
    rc, out, err, secs = mpirun(4, [gp, plan4, "--fault", "1:kill:2", "--timeout", "30"], timeout=120)
    check(rc not in (0, None) and secs < 60, f"kill rank 1: rc {rc}, {secs:.0f} s\n{err}")

    # A rank that stalls: its peers' collective times out and every rank ends.
    rc, out, err, secs = mpirun(4, [gp, plan4, "--fault", "3:stall:2", "--timeout", "3"], timeout=120)
    check(rc == 4 and "did not finish within" in err and secs < 60,
          f"stall on rank 3: rc {rc}, {secs:.0f} s\n{err}")


def nccl_status(rc, err):
    """What one `exec --backend nccl` run says about this machine:
    "no-build" (no NCCL backend compiled in), "no-gpu" (no driver, no
    device, no loadable module), "shared" (more ranks than devices on the
    node: refused before any collective), or "ran" (anything else, judged by
    its exit code and report)."""
    if rc == 2 and "has no NCCL/CUDA backend" in err:
        return "no-build"
    if rc == 4 and "no usable GPU" in err:
        return "shared" if re.search(r"ranks share \d+ device", err) else "no-gpu"
    return "ran"


def nccl_outcome(one, two):
    """The decision of the NCCL test from the status of its one-rank and
    two-rank runs: (verdict, why), verdict "skip" (exit 77), "run" (the runs
    that ran are checked) or "fail". No build or no GPU: skip, and both runs
    must agree. One GPU: the one-rank run runs (kernels, cuBLAS, NCCL on one
    rank) and the two-rank run is refused as sharing one device. A machine
    that runs one rank but has no GPU for two, or the other way round, fails."""
    if one == two and one in ("no-build", "no-gpu"):
        return "skip", "this build has no NCCL backend" if one == "no-build" else "no usable GPU"
    if one == "ran" and two in ("ran", "shared"):
        return "run", "two ranks share one GPU: the two-rank run skipped" if two == "shared" else ""
    return "fail", f"one rank: {one}, two ranks: {two}"


def case_nccl():
    """The NCCL backend on 1 rank (any GPU) and 2 ranks (one GPU each). The
    two-rank run is skipped on a node with one GPU (NCCL refuses a device
    twice in a communicator); everything is skipped (77) when this build has
    no NCCL or no GPU is usable (nccl_outcome)."""
    m, k, n, p = 168, 336, 504, 84
    g = chain_graph(m, k, n, p)
    gp = write("chain.json", g)
    # One rank: the plan searched for one device (no collective; the GPU
    # kernels, cuBLAS and the NCCL setup run).
    one = os.path.join(TMP, "chain_nccl_1.plan.json")
    s = subprocess.run([BIN, "search", gp, "--devices", "1", "-q", "-o", one], capture_output=True,
                       text=True)
    check(s.returncode == 0, f"search for one device: {s.stderr}")
    runs = {}
    for ranks, pp in ((1, one), (2, write("chain_nccl_2.plan.json", plan_json(g, [2], ONE_AXIS)))):
        rc, out, err, secs = mpirun(ranks, [gp, pp, "--backend", "nccl", "--check", "--timeout", "60"])
        runs[ranks] = (nccl_status(rc, err), rc, out, err)
        print(f"{ranks} rank(s): {runs[ranks][0]}, rc {rc}, {secs:.1f} s")
    verdict, why = nccl_outcome(runs[1][0], runs[2][0])
    if why:
        print(why)
    if verdict == "skip":
        print("skipped")
        return 77
    if not check(verdict == "run", f"nccl: {why}\n" + "\n".join(r[3] for r in runs.values())):
        return 0
    for ranks, (status, rc, out, err) in runs.items():
        if status != "ran":
            continue
        check(rc == 0 and "check: passed" in out, f"nccl on {ranks} rank(s): rc {rc}\n{out}\n{err}")
        nums = report_numbers(out)
        check(nums["measured"] == nums["model"] == nums["predicted"],
              f"nccl bytes on {ranks} rank(s): {nums}")
        print(out, end="")
    return 0


# ---- training steps (--train) ---------------------------------------------

def train_numbers(out):
    """Per phase of a training step: (measured, predicted, model, calls)."""
    nums = {}
    for phase in ("forward", "backward", "gradient sync"):
        m = re.search(phase + r": measured (\d+), predicted (\d+), cost model (\d+) \((?:equal|differs)\); "
                      r"collectives: all-gather (\d+), all-reduce (\d+), reduce-scatter (\d+), all-to-all (\d+)", out)
        nums[phase] = (int(m.group(1)), int(m.group(2)), int(m.group(3)),
                       tuple(int(x) for x in m.groups()[3:])) if m else None
    return nums


def train_ok(label, n, graph_path, plan_path, optimizer="sgd-momentum", steps=3, backward_traffic=False,
             sync_model_equal=False, extra=()):
    """--train --check must pass: every step's loss and the trained
    parameters equal a one-device run, and every phase's bytes the
    prediction from the layouts (the command checks both, on every rank)."""
    args = [graph_path, plan_path, "--train", "--steps", str(steps), "--check", "--optimizer", optimizer,
            "--lr", "0.001" if optimizer == "adam" else "0.01", "--timeout", "60"] + list(extra)
    rc, out, err, secs = mpirun(n, args)
    print(f"train {label}: {n} ranks, rc {rc}, {secs:.1f} s", flush=True)
    if not check(rc == 0 and "check: passed" in out, f"train {label}: rc {rc}\n{out}\n{err}"):
        return
    nums = train_numbers(out)
    if not check(all(nums.values()), f"train {label}: report unreadable\n{out}"):
        return
    for phase, (measured, predicted, _, _) in nums.items():
        check(measured == predicted, f"train {label}: {phase} measured {measured} != predicted {predicted}")
    losses = re.search(r"loss \(sum of one-element outputs and 1/2 mean\(y\^2\) of the others\):\s+([^\n]+)", out)
    check(losses is not None and len(losses.group(1).split()) == steps, f"train {label}: {steps} losses\n{out}")
    if backward_traffic:
        check(nums["backward"][0] > 0, f"train {label}: the backward pass sent nothing\n{out}")
    if sync_model_equal:
        measured, _, model, _ = nums["gradient sync"]
        check(measured > 0 and measured == model,
              f"train {label}: gradient sync measured {measured}, cost model {model}\n{out}")
    print(out, end="", flush=True)
    return out


def case_train():
    """Training steps: the chain graph's hand-written plans (every
    redistribution kind, forward and backward, on 1 and 2 axes, partial sums
    reduced hierarchically), a vocabulary-parallel loss, and searched,
    data-parallel and tensor-parallel (megatron) plans of an MLP and a
    transformer block; ZeRO 1 and 2; then a wrong gradient on one rank must
    fail the check, and a ZeRO 3 plan's forward pass alone must be refused
    (case_zero3 trains it)."""
    m, k, n, p = 24, 48, 36, 12
    g = chain_graph(m, k, n, p)
    gp = write("chain_train.json", g)
    for label, mesh, cuts in (("one axis", [2], ONE_AXIS), ("two axes", [2, 2], TWO_AXES),
                              ("hierarchical", [2, 2], HIERARCHICAL)):
        pp = write(f"chain_train_{label}.plan.json", plan_json(g, mesh, cuts))
        train_ok(f"chain {label}", mesh[0] * (mesh[1] if len(mesh) > 1 else 1), gp, pp, backward_traffic=True)
    cost = write("train_no_latency.json", {"count_latency": False})  # plans that cut
    lg = loss_graph(8, 12, 20, "mean")
    lgp = write("loss_train.json", lg)
    pp = write("loss_train.plan.json", plan_json(lg, [2, 2], {"mm": ["i", "j"], "ce": ["b0", "c"]}))
    train_ok("vocabulary-parallel loss", 4, lgp, pp, optimizer="sgd")
    for gpath in (os.path.join(ROOT, "data/graphs/ffn.json"),
                  os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json")):
        for algo, ranks in (("rec", 4), ("data-parallel", 2), ("megatron", 2), ("megatron", 4)):
            plan = os.path.join(TMP, f"{os.path.basename(gpath)}.{algo}.{ranks}.train.plan.json")
            s = subprocess.run([BIN, "search", gpath, "--devices", str(ranks), "--algo", algo, "--zero", "0",
                                "--microbatches", "1", "--cost", cost, "-q", "-o", plan],
                               capture_output=True, text=True)
            if not check(s.returncode == 0, f"search {gpath} {algo} {ranks}: {s.stderr}"):
                continue
            train_ok(f"{os.path.basename(gpath)} {algo} on {ranks}", ranks, gpath, plan, optimizer="adam",
                     steps=2, backward_traffic=algo == "megatron", sync_model_equal=algo == "data-parallel")
    # A wrong backward on one rank (mm3's gradients doubled there; mm3 is
    # operator 6, and the gradients before the Softmax vanish in this graph,
    # whose rows of softmax weights sum to one) must fail the check, with the
    # gradient and parameter named.
    pp = write("chain_train_fault.plan.json", plan_json(g, [2], ONE_AXIS))
    rc, out, err, _ = mpirun(2, [gp, pp, "--train", "--steps", "2", "--check", "--fault", "1:grad:6"])
    check(rc not in (0, None) and "check: FAILED" in out and "check gradient of w3" in out,
          f"wrong gradient not caught: rc {rc}\n{out}\n{err}")
    # Adam over ten steps on two data-parallel ranks: the key bias's gradient
    # vanishes analytically (softmax ignores a shift of all of a query's key
    # scores), so it is float noise whose value the ranks' summation order
    # changes, and Adam moves each such element by up to lr a step in the
    # direction the noise picks (it failed the check before: 4.5e-4 apart).
    # The check takes those elements within Adam's reach and counts the ones
    # outside the tolerance; every other element must agree to 1e-6.
    gpt = os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json")
    dplan = os.path.join(TMP, "adam_noise.plan.json")
    s = subprocess.run([BIN, "search", gpt, "--devices", "2", "--algo", "data-parallel", "--zero", "0",
                        "--microbatches", "1", "-q", "-o", dplan], capture_output=True, text=True)
    if check(s.returncode == 0, f"search for the Adam noise run: {s.stderr}"):
        rc, out, err, _ = mpirun(2, [gpt, dplan, "--train", "--optimizer", "adam", "--steps", "10", "--check"])
        noise = re.search(r"check (\d+) parameter element\(s\) have float-noise gradients .*: (\d+) of them "
                          r"outside the tolerance", out)
        worst = re.search(r"parameter\(s\) after 10 step\(s\): max error relative to 1\+max\|ref\| (\S+)", out)
        check(rc == 0 and "check: passed" in out and noise and int(noise.group(2)) >= 1 and worst
              and float(worst.group(1)) <= 1e-6,
              f"Adam's float-noise elements: rc {rc}\n{out}\n{err}")
    # ZeRO 1 and 2: the gradient reduce-scattered into shards, the optimizer
    # on the shard, the parameter gathered back: the same bytes as the
    # all-reduce, which the cost model counts exactly on data-parallel plans.
    gpt = os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json")
    for zero in ("1", "2"):
        for ranks in (2, 4):
            zplan = os.path.join(TMP, f"zero{zero}.{ranks}.plan.json")
            s = subprocess.run([BIN, "search", gpt, "--devices", str(ranks), "--algo", "data-parallel",
                                "--zero", zero, "--microbatches", "1", "-q", "-o", zplan],
                               capture_output=True, text=True)
            if check(s.returncode == 0, f"search --zero {zero}: {s.stderr}"):
                train_ok(f"ZeRO {zero} data-parallel on {ranks}", ranks, gpt, zplan, optimizer="adam", steps=2,
                         sync_model_equal=True)
    # ZeRO 3 trains (case_zero3); its forward pass alone is refused, with the
    # setting's path, before any traffic.
    zplan = os.path.join(TMP, "zero3.plan.json")
    s = subprocess.run([BIN, "search", gpt, "--devices", "2", "--algo", "data-parallel", "--zero", "3",
                        "--microbatches", "1", "-q", "-o", zplan], capture_output=True, text=True)
    if check(s.returncode == 0, f"search --zero 3: {s.stderr}"):
        rc, out, err, _ = mpirun(2, [gpt, zplan])
        check(rc == 2 and "/training/zero_stage" in err and "--train" in err,
              f"ZeRO 3 forward pass not refused: rc {rc}\n{out}\n{err}")
    # Recomputation trains under ZeRO 2 (and case_recompute).
    rplan = os.path.join(TMP, "recompute.plan.json")
    s = subprocess.run([BIN, "search", gpt, "--devices", "2", "--algo", "data-parallel", "--zero", "2",
                        "--recompute", "full", "--microbatches", "1", "-q", "-o", rplan],
                       capture_output=True, text=True)
    if check(s.returncode == 0, f"search --recompute full: {s.stderr}"):
        rc, out, err, _ = mpirun(2, [gpt, rplan, "--train", "--check", "--steps", "2"])
        check(rc == 0 and "check: passed" in out and "recomputation full" in out,
              f"recomputation under --train: rc {rc}\n{out}\n{err}")


def parameters_of(graph_path):
    """(name, shape) of every parameter of a graph file."""
    with open(graph_path) as f:
        return [(t["name"], t["shape"]) for t in json.load(f)["tensors"] if t.get("kind") == "parameter"]


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def zero3_expected(params, ways, stage=None):
    """Per rank, for data-parallel plans over `ways` ranks: the bytes one
    all-gather of every ZeRO-3 parameter sends ((ways-1)/ways of it, f32) and
    the parameter bytes a rank keeps between steps. A parameter is a shard
    when one of its dims divides by `ways` (else kept whole, as in stage 0);
    `stage`: each parameter's stage (all 3 when None)."""
    gather = kept = 0
    for name, shape in params:
        size = numel(shape) * 4
        z3 = (stage is None or stage[name] >= 3) and any(d % ways == 0 for d in shape)
        if z3:
            gather += size * (ways - 1) // ways
            kept += size // ways
        else:
            kept += size
    return gather, kept


def held_numbers(out):
    m = re.search(r"parameters held \(rank 0, bytes\): between steps (\d+), peak in the passes (\d+); "
                  r"cost model \(weights\) (\d+); (\d+) of (\d+) parameter\(s\) kept as ZeRO-3 shards", out)
    return tuple(int(x) for x in m.groups()) if m else None


def case_zero3():
    """ZeRO stage 3 and ZeRO stages per parameter (docs/exec.md, ZeRO 3):
    data-parallel plans of ffn.json searched with --zero 3 on 2 and 4 ranks
    (SGD and Adam), the small GPT-2 block on 2x2 with 2 microbatches, and a
    plan edited to give ffn.json's parameters stages 3, 2, 1 and 0. Every
    run passes --check (the parameters after the steps, gathered, equal the
    one-device run's) with every phase's bytes equal to the prediction; the
    backward's all-gathers, the sync's reduce-scatters and the parameter
    bytes kept are recomputed here from the graph's shapes. A doubled
    gathered shard on one rank must fail the check."""
    ffn = os.path.join(ROOT, "data/graphs/ffn.json")
    gpt = os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json")
    ffn_params = parameters_of(ffn)
    plans = {}
    for ranks, optimizer in ((2, "adam"), (4, "sgd")):
        zplan = os.path.join(TMP, f"zero3.ffn.{ranks}.plan.json")
        s = subprocess.run([BIN, "search", ffn, "--devices", str(ranks), "--algo", "data-parallel", "--zero", "3",
                            "--microbatches", "1", "-q", "-o", zplan], capture_output=True, text=True)
        if not check(s.returncode == 0, f"search ffn --zero 3 on {ranks}: {s.stderr}"):
            continue
        plans[ranks] = zplan
        out = train_ok(f"ZeRO 3 ffn on {ranks}", ranks, ffn, zplan, optimizer=optimizer, steps=2)
        if out is None:
            continue
        nums, held = train_numbers(out), held_numbers(out)
        gather, kept = zero3_expected(ffn_params, ranks)
        # Data parallelism: the backward sends the parameters' gathers alone.
        check(nums["backward"][0] == gather and nums["backward"][3][0] > 0,
              f"ZeRO 3 ffn on {ranks}: backward {nums['backward']}, expected the gathers' {gather}\n{out}")
        check(nums["forward"][0] >= gather, f"ZeRO 3 ffn on {ranks}: forward {nums['forward']} < {gather}")
        check(held is not None and held[0] == kept and held[1] > kept,
              f"ZeRO 3 ffn on {ranks}: parameters held {held}, expected {kept} kept\n{out}")
        if ranks == 2:
            # One axis: the reduce-scatter's bytes are the gather's, and the
            # cost model's count is exact in every phase.
            check(nums["gradient sync"][0] == gather and nums["gradient sync"][3][2] == len(ffn_params),
                  f"ZeRO 3 ffn on 2: sync {nums['gradient sync']}, expected {gather}\n{out}")
            for phase, (measured, _, model, _) in nums.items():
                check(measured == model, f"ZeRO 3 ffn on 2: {phase} measured {measured}, cost model {model}")
            check(held is not None and held[2] == kept, f"ZeRO 3 ffn on 2: cost model weights {held}")
    if 2 in plans:
        rc, out, err, _ = mpirun(2, [ffn, plans[2], "--train", "--steps", "2", "--check", "--fault", "1:gather:0"])
        check(rc == 4 and "check: FAILED" in out and "check loss of step 1" in out,
              f"ZeRO 3: a doubled gathered shard not caught: rc {rc}\n{out}\n{err}")
    # The small GPT-2 block on 2x2 with 2 microbatches: gathered in each
    # microbatch's passes, the gradient reduce-scattered once.
    gplan = os.path.join(TMP, "zero3.gpt.plan.json")
    s = subprocess.run([BIN, "search", gpt, "--devices", "4", "--algo", "data-parallel", "--zero", "3",
                        "--microbatches", "2", "-q", "-o", gplan], capture_output=True, text=True)
    if check(s.returncode == 0, f"search gpt --zero 3 --microbatches 2: {s.stderr}"):
        with open(gplan) as f:
            doc = json.load(f)
        check([a["size"] for a in doc["mesh"]["axes"]] == [2, 2], f"GPT-2 ZeRO 3: mesh {doc['mesh']}")
        out = train_ok("ZeRO 3 GPT-2 block on 2x2, 2 microbatches", 4, gpt, gplan, optimizer="adam", steps=2)
        if out is not None:
            nums, held = train_numbers(out), held_numbers(out)
            one = sum(numel(shape) * 4 for _, shape in parameters_of(gpt)) // 2  # f32, half on each rank of c0
            check(held is not None and held[3] == held[4] == len(parameters_of(gpt)) and held[0] == one,
                  f"GPT-2 ZeRO 3: parameters held {held}, expected {one} kept\n{out}")
            check(nums["backward"][0] == 2 * one and nums["gradient sync"][0] == one,
                  f"GPT-2 ZeRO 3: backward {nums['backward']}, sync {nums['gradient sync']}, "
                  f"expected {2 * one} and {one}\n{out}")
    # Stages per parameter (zero_params) on 2x2: 3, 2, 1, 0 in turn.
    if 4 in plans:
        with open(plans[4]) as f:
            doc = json.load(f)
        stage = {name: (3, 2, 1, 0)[i % 4] for i, (name, _) in enumerate(ffn_params)}
        doc["training"]["zero_stage"] = 0
        doc["training"]["zero_params"] = stage
        mplan = os.path.join(TMP, "zero.mixed.plan.json")
        with open(mplan, "w") as f:
            json.dump(doc, f)
        out = train_ok("ZeRO stages per parameter ffn on 4", 4, ffn, mplan, optimizer="sgd-momentum", steps=2)
        if out is not None:
            nums, held = train_numbers(out), held_numbers(out)
            gather, kept = zero3_expected(ffn_params, 4, stage)
            shards = sum(1 for name, shape in ffn_params
                         if stage[name] == 3 and any(d % 4 == 0 for d in shape))
            check(held is not None and held[0] == kept and held[3] == shards,
                  f"per-parameter ZeRO: held {held}, expected {kept} kept and {shards} shards\n{out}")
            check(nums["backward"][0] == gather, f"per-parameter ZeRO: backward {nums['backward']}, expected {gather}")
            for phase in ("backward", "gradient sync"):
                check(nums[phase][0] == nums[phase][2],
                      f"per-parameter ZeRO: {phase} measured {nums[phase][0]}, cost model {nums[phase][2]}")


def layout_kinds_graph(m, k, n, depth):
    """x[m,k] @ w[k,n] -> h; a = Slice(h, dim 1 from 2, step 2); b = ReLU(h);
    c = Concat(a, b, dim 1); oh = OneHot(ids[m], depth); y = c + oh."""
    t = lambda name, shape, kind=None, dtype="f32": dict(name=name, shape=shape, dtype=dtype,
                                                         **({"kind": kind} if kind else {}))
    half = (n - 2 + 1) // 2
    width = half + n
    assert depth == width
    return {"format": "recsearch.graph", "version": 1, "name": "layout_kinds",
            "tensors": [t("x", [m, k], "input"), t("w", [k, n], "parameter"), t("ids", [m], "input", "i64"),
                        t("h", [m, n]), t("a", [m, half]), t("b", [m, n]), t("c", [m, width]),
                        t("oh", [m, depth]), t("y", [m, width])],
            "operators": [dict(name="mm", type="MatMul", inputs=["x", "w"], outputs=["h"]),
                          dict(name="sl", type="Slice", inputs=["h"], outputs=["a"],
                               attrs={"starts": [2], "ends": [n], "axes": [1], "steps": [2]}),
                          dict(name="act", type="ReLU", inputs=["h"], outputs=["b"]),
                          dict(name="cat", type="Concat", inputs=["a", "b"], outputs=["c"], attrs={"axis": 1}),
                          dict(name="oh", type="OneHot", inputs=["ids"], outputs=["oh"], attrs={"depth": depth}),
                          dict(name="add", type="Add", inputs=["c", "oh"], outputs=["y"])]}


def case_layout_kinds():
    """Concat, Slice and OneHot: hand-written plans (the one-hot's depth dim
    cut, the slice and the concat cut across rows) and searched ones, forward
    and training steps, on 2 and 4 ranks."""
    m, k, n = 8, 6, 10
    g = layout_kinds_graph(m, k, n, 14)
    gp = write("layout_kinds.json", g)
    one = {"mm": ["i"], "sl": ["d0"], "act": ["d1"], "cat": ["d0"], "oh": ["d1"], "add": ["d1"]}
    two = {"mm": ["j", "i"], "sl": ["d0", None], "act": ["d1", "d0"], "cat": ["d0", "d0"],
           "oh": ["d1", "d0"], "add": ["d0", "d1"]}
    for label, mesh, cuts in (("one axis", [2], one), ("2x2", [2, 2], two)):
        ranks = mesh[0] * (mesh[1] if len(mesh) > 1 else 1)
        pp = write(f"layout_kinds_{ranks}.plan.json", plan_json(g, mesh, cuts))
        run_ok(f"concat, slice, one-hot on {label}", ranks, gp, pp)
        train_ok(f"concat, slice, one-hot on {label}", ranks, gp, pp, backward_traffic=True)
    cost = write("layout_kinds_no_latency.json", {"count_latency": False})
    for algo, ranks in (("rec", 4), ("megatron", 2)):
        plan = os.path.join(TMP, f"layout_kinds.{algo}.{ranks}.plan.json")
        s = subprocess.run([BIN, "search", gp, "--devices", str(ranks), "--algo", algo, "--zero", "0",
                            "--microbatches", "1", "--cost", cost, "-q", "-o", plan], capture_output=True, text=True)
        if check(s.returncode == 0, f"search layout_kinds {algo} {ranks}: {s.stderr}"):
            run_ok(f"concat, slice, one-hot {algo} on {ranks}", ranks, gp, plan)
            train_ok(f"concat, slice, one-hot {algo} on {ranks}", ranks, gp, plan, optimizer="adam")


# ---- predicted times (the cost model next to the clock) --------------------

PREDICTED_TRAIN = re.compile(r"predicted by the cost model \(([^)]*)\): step ([\d.]+) ms; forward ([\d.]+), "
                             r"backward ([\d.]+), gradient sync ([\d.]+), optimizer ([\d.]+) ms")
PREDICTED_FORWARD = re.compile(r"predicted by the cost model \(([^)]*)\): forward ([\d.]+) ms; "
                               r"measured/predicted ([\d.]+|-)")


def model_phases(ev, graph, mode):
    """The phases of a step computed here from `eval --format json --detail
    full`, independently of exec: the backward's compute (backward_compute_s,
    which tests/plan/evaluator_test.cpp holds to a hand count) and the
    recomputed forward to the backward, the rest of the compute to the
    forward, parameter-gradient events to the sync, other backward-phase
    events to the backward, the rest to the forward; no optimizer time."""
    s = ev["summary"]
    params = {t["name"] for t in graph["tensors"] if t.get("kind") == "parameter"}
    if mode == "train":
        recompute = s.get("recompute_s", 0.0)
        fwd = s["compute_s"] - recompute - s["backward_compute_s"]
        bwd = s["backward_compute_s"] + recompute
    else:
        fwd, bwd = s["compute_s"], 0.0
    sync = 0.0
    for r in ev["redistributions"]:
        if r["reason"] == "gradient" and r.get("tensor") in params:
            sync += r["seconds"]
        elif r["phase"] == "backward":
            bwd += r["seconds"]
        else:
            fwd += r["seconds"]
    return {"step": s["step_time_s"], "forward": fwd, "backward": bwd, "sync": sync, "optimizer": 0.0}


def evaluate(graph_path, plan_path, mode, cluster=None):
    out = os.path.join(TMP, "eval.json")
    cmd = [BIN, "eval", graph_path, plan_path, "--mode", mode, "--format", "json", "--detail", "full",
           "-q", "-o", out] + (["--cluster", cluster] if cluster else [])
    s = subprocess.run(cmd, capture_output=True, text=True)
    if not check(s.returncode == 0, f"eval {plan_path}: {s.stderr}"):
        return None
    with open(out) as f:
        return json.load(f)


def same_ms(label, printed, seconds):
    """A figure exec printed in ms with 3 decimals equals the model's seconds."""
    check(abs(float(printed) - seconds * 1e3) <= 0.0005 + 1e-9 * seconds * 1e3,
          f"{label}: exec printed {printed} ms, the cost model gives {seconds * 1e3:.6f} ms")


def predicted_ok(label, n, graph_path, plan_path, train, cluster=None):
    """exec's printed predicted figures equal the cost model's, computed
    here from eval's events and summary on the same cluster."""
    mode = "train" if train else "infer"
    args = [graph_path, plan_path, "--steps", "1"] + (["--train"] if train else []) + \
        (["--cluster", cluster] if cluster else [])
    rc, out, err, secs = mpirun(n, args)
    print(f"predicted {label}: {n} ranks, rc {rc}, {secs:.1f} s", flush=True)
    if not check(rc == 0, f"predicted {label}: rc {rc}\n{out}\n{err}"):
        return None
    print(out, end="", flush=True)
    ev = evaluate(graph_path, plan_path, mode, cluster)
    if ev is None:
        return None
    with open(graph_path) as f:
        want = model_phases(ev, json.load(f), mode)
    source = f"cluster {cluster}" if cluster else "the plan's cluster"
    if train:
        m = PREDICTED_TRAIN.search(out)
        if not check(m is not None, f"predicted {label}: no predicted line\n{out}"):
            return None
        check(m.group(1) == source, f"predicted {label}: on '{m.group(1)}', want '{source}'")
        for key, printed in zip(("step", "forward", "backward", "sync", "optimizer"), m.groups()[1:]):
            same_ms(f"predicted {label} {key}", printed, want[key])
        check(re.search(r"measured/predicted: step [\d.]+, forward [\d.]+, backward [\d.]+, gradient sync "
                        r"([\d.]+|-), optimizer -", out) is not None, f"predicted {label}: no ratios\n{out}")
    else:
        m = PREDICTED_FORWARD.search(out)
        if not check(m is not None, f"predicted {label}: no predicted line\n{out}"):
            return None
        check(m.group(1) == source, f"predicted {label}: on '{m.group(1)}', want '{source}'")
        same_ms(f"predicted {label} forward", m.group(2), want["forward"])
    return want


def case_phases():
    """`exec` prints the cost model's time per phase next to the measured
    one: on a slow calibrated-style cluster file (--cluster, its cost object
    read) for a data-parallel training plan of ffn.json (every phase, the
    sync included) and the chain graph's forward pass, and on the plan's own
    cluster for the chain graph's training step."""
    cluster = write("slow_cluster.json", {
        "format": "recsearch.cluster", "version": 1, "name": "slow test ranks",
        "levels": [{"name": "rank", "size": 2, "bandwidth_GBps": 0.001, "latency_us": 100}],
        "device": {"peak_TFLOPs": 1e-5, "memory_GiB": 64, "memory_bandwidth_GBps": 1},
        "cost": {"compute_efficiency": 1, "overlap": False}})
    ffn = os.path.join(ROOT, "data/graphs/ffn.json")
    plan = os.path.join(TMP, "ffn.dp.phases.plan.json")
    s = subprocess.run([BIN, "search", ffn, "--cluster", cluster, "--algo", "data-parallel", "--zero", "0",
                        "--microbatches", "1", "--recompute", "none", "-q", "-o", plan],
                       capture_output=True, text=True)
    if check(s.returncode == 0, f"search ffn data-parallel: {s.stderr}"):
        want = predicted_ok("ffn data-parallel, --cluster", 2, ffn, plan, True, cluster)
        if want is not None:
            check(want["sync"] > 0 and want["backward"] > 0 and want["forward"] > 0,
                  f"predicted ffn data-parallel: a phase without time {want}")
    g = chain_graph(24, 48, 36, 12)
    gp = write("chain_phases.json", g)
    pp = write("chain_phases.plan.json", plan_json(g, [2], ONE_AXIS))
    predicted_ok("chain forward, --cluster", 2, gp, pp, False, cluster)
    predicted_ok("chain training, the plan's cluster", 2, gp, pp, True)


def case_buckets():
    """Bucketed gradient synchronisation: a data-parallel training plan of
    ffn.json on 2 ranks passes --check with one all-reduce per parameter
    (--bucket-mb 0), with every gradient in one bucket (the default 25 MiB)
    and with buckets of 0.5 MiB; the gradient sync sends the same bytes,
    equal to the prediction and the cost model's, in fewer collectives."""
    ffn = os.path.join(ROOT, "data/graphs/ffn.json")
    plan = os.path.join(TMP, "ffn.dp.buckets.plan.json")
    s = subprocess.run([BIN, "search", ffn, "--devices", "2", "--algo", "data-parallel", "--zero", "0",
                        "--microbatches", "1", "-q", "-o", plan], capture_output=True, text=True)
    if not check(s.returncode == 0, f"search ffn data-parallel: {s.stderr}"):
        return
    with open(ffn) as f:
        params = sum(1 for t in json.load(f)["tensors"] if t.get("kind") == "parameter")
    syncs = {}
    for mib in ("0", "25", "0.5"):
        args = [ffn, plan, "--train", "--steps", "2", "--check", "--bucket-mb", mib, "--timeout", "60"]
        rc, out, err, secs = mpirun(2, args)
        print(f"buckets {mib} MiB: rc {rc}, {secs:.1f} s", flush=True)
        if not check(rc == 0 and "check: passed" in out, f"buckets {mib} MiB: rc {rc}\n{out}\n{err}"):
            continue
        nums = train_numbers(out)
        if not check(nums["gradient sync"] is not None, f"buckets {mib} MiB: report unreadable\n{out}"):
            continue
        measured, predicted, model, calls = nums["gradient sync"]
        check(measured == predicted == model and measured > 0,
              f"buckets {mib} MiB: sync measured {measured}, predicted {predicted}, model {model}")
        syncs[mib] = (measured, calls[1])
    if len(syncs) == 3:
        check(len({b for b, _ in syncs.values()}) == 1, f"bucketing changed the bytes: {syncs}")
        check(syncs["0"][1] == params, f"one all-reduce per parameter ({params}): {syncs}")
        check(syncs["25"][1] == 1, f"every gradient in one 25 MiB bucket: {syncs}")
        check(1 < syncs["0.5"][1] < params, f"0.5 MiB buckets between: {syncs}")
    rc, out, err, _ = mpirun(2, [ffn, plan, "--bucket-mb", "1"])
    check(rc == 2 and "need --train" in err, f"--bucket-mb without --train: rc {rc}\n{err}")


def nodes_of_two(name, nodes):
    """A cluster file of `nodes` nodes of 2 devices (10 GB/s between nodes,
    100 GB/s inside one, 10 TFLOP/s devices): the pipeline tests' groups."""
    return write(name, {
        "format": "recsearch.cluster", "version": 1, "name": f"{nodes} nodes of two",
        "levels": [{"name": "node", "size": nodes, "bandwidth_GBps": 10, "latency_us": 5},
                   {"name": "gpu", "size": 2, "bandwidth_GBps": 100, "latency_us": 2}],
        "device": {"peak_TFLOPs": 10, "memory_GiB": 16, "memory_bandwidth_GBps": 100}})


def case_pipeline():
    """Pipelined plans (a "pipeline" section: 2 stages on 2 device groups of
    2 ranks, 2 microbatches, searched on a cluster of 2 nodes of 2): the 1F1B
    forward pass with --check (every output of every microbatch against a
    one-device run), point-to-point bytes equal to the prediction from the
    plan and to the cost model's, the stages' collectives to the prediction;
    a killed stage rank and a stalled one end every rank; then training
    (pipeline_training)."""
    cluster = nodes_of_two("two_by_two.json", 2)
    plans = {}
    for gpath in (os.path.join(ROOT, "data/graphs/ffn.json"),
                  os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json")):
        name = os.path.basename(gpath)
        plan = os.path.join(TMP, f"{name}.pipeline.plan.json")
        s = subprocess.run([BIN, "search", gpath, "--cluster", cluster, "--stages", "2", "--microbatches", "2",
                            "-q", "-o", plan], capture_output=True, text=True)
        if not check(s.returncode == 0, f"search --stages 2 {name}: {s.stderr}"):
            continue
        with open(plan) as f:
            pp = json.load(f).get("pipeline")
        if not check(pp is not None and pp["device_groups"] == 2 and len(pp["stages"]) == 2,
                     f"{name}: no 2-stage pipeline plan"):
            continue
        plans[name] = (gpath, plan, pp)
        rc, out, err, secs = mpirun(4, [gpath, plan, "--check", "--timeout", "60"])
        print(f"pipeline {name}: 4 ranks, rc {rc}, {secs:.1f} s\n{out}", end="", flush=True)
        if not check(rc == 0 and "check: passed" in out, f"pipeline {name}: rc {rc}\n{out}\n{err}"):
            continue
        m = re.search(r"point to point: measured (\d+), predicted (\d+), cost model (\d+) \(equal on every rank\)", out)
        check(m is not None and int(m.group(1)) == int(m.group(2)) == int(m.group(3)) > 0,
              f"pipeline {name}: point-to-point bytes\n{out}")
        m = re.search(r"stage collectives: measured (\d+), predicted (\d+)", out)
        check(m is not None and m.group(1) == m.group(2), f"pipeline {name}: collective bytes\n{out}")
        check("1F1B forward over 2 microbatch(es)" in out and "every rank matches" in out,
              f"pipeline {name}: report\n{out}")
    if "gpt2_block_small.json" not in plans:
        return
    gpath, plan, pp = plans["gpt2_block_small.json"]
    op = pp["stages"][1]["range"][0] + 1  # an operator of the second stage (ranks 2 and 3)
    rc, out, err, secs = mpirun(4, [gpath, plan, "--fault", f"3:kill:{op}", "--timeout", "30"], timeout=120)
    check(rc not in (0, None) and secs < 60, f"pipeline: kill stage rank 3: rc {rc}, {secs:.0f} s\n{err}")
    op0 = pp["stages"][0]["range"][0] + 1
    rc, out, err, secs = mpirun(4, [gpath, plan, "--fault", f"0:stall:{op0}", "--timeout", "3"], timeout=120)
    check(rc == 4 and "did not finish within" in err and secs < 60,
          f"pipeline: stall on stage rank 0: rc {rc}, {secs:.0f} s\n{err}")
    pipeline_training(cluster, plans)


PIPE_BYTES = re.compile(r"    (forward|backward): point to point measured (\d+), predicted (\d+), cost model (\d+) "
                        r"\((equal on every rank|differs on some rank)\); stage collectives measured (\d+), "
                        r"predicted (\d+)")


def pipeline_training(cluster, plans):
    """--train --check of 2-stage 1F1B plans on 2 groups of 2 ranks: ffn.json
    and the small GPT-2 block with 2 microbatches (SGD) and 4 (Adam). Every
    step's loss and every stage's parameters equal a one-device full-batch
    run; per rank the point-to-point and collective bytes of the forward and
    the backward equal the prediction (exec fails otherwise) and the cost
    model's; the boundary gradients sent back are as many bytes as the
    boundary tensors sent forward; stage 0 keeps 2 microbatches'
    activations, stage 1 one. The searched stage plans use ZeRO 1 and
    selective recomputation; one with --zero 0 --recompute full trains too.
    Three stages of ffn.json on 3 groups of 2 keep 3, 2 and 1 microbatches.
    A doubled boundary gradient fails the check, a killed stage rank ends
    every rank. ZeRO 3 stages (pipeline_zero3), weights tied across the
    groups (pipeline_tied) and the interleaved schedule
    (pipeline_interleaved) train."""
    for name, (gpath, plan2, _) in plans.items():
        cases = [(2, "sgd", "0.01", []), (4, "adam", "0.001", [])]
        if name == "gpt2_block_small.json":
            cases.append((2, "sgd-momentum", "0.01", ["--zero", "0", "--recompute", "full"]))
        for m, optimizer, lr, flags in cases:
            plan = plan2
            if m != 2 or flags:
                plan = os.path.join(TMP, f"{name}.pipeline{m}{''.join(flags)}.plan.json")
                s = subprocess.run([BIN, "search", gpath, "--cluster", cluster, "--stages", "2",
                                    "--microbatches", str(m), "-q", "-o", plan] + flags, capture_output=True, text=True)
                if not check(s.returncode == 0, f"search --stages 2 --microbatches {m} {flags} {name}: {s.stderr}"):
                    continue
            label = f"pipeline training {name} m={m} {optimizer} {' '.join(flags)}"
            rc, out, err, secs = mpirun(4, [gpath, plan, "--train", "--steps", "2", "--check", "--optimizer",
                                            optimizer, "--lr", lr, "--timeout", "60"])
            print(f"{label}: 4 ranks, rc {rc}, {secs:.1f} s\n{out}", end="", flush=True)
            if not check(rc == 0 and "check: passed" in out and "every rank matches" in out
                         and f"1F1B training over {m} microbatch(es)" in out, f"{label}: rc {rc}\n{out}\n{err}"):
                continue
            phases = {p[0]: [int(x) for x in p[1:4]] + [p[4], int(p[5]), int(p[6])]
                      for p in PIPE_BYTES.findall(out)}
            if not check(set(phases) == {"forward", "backward"}, f"{label}: bytes lines\n{out}"):
                continue
            for phase, (meas, pred, model, eq, cmeas, cpred) in phases.items():
                check(meas == pred == model and eq == "equal on every rank" and cmeas == cpred,
                      f"{label}: {phase} bytes {phases[phase]}")
            per_rank = re.search(r"point to point per rank \(forward/backward\): (.*)", out)
            pairs = [tuple(int(v) for v in x.split()[1].split("/")) for x in per_rank.group(1).split(", ")] \
                if per_rank else []
            # Stage 0 (ranks 0, 1) sends forward only, stage 1 (ranks 2, 3)
            # backward only; the gradients are the boundary tensors' sizes.
            check(len(pairs) == 4 and all(f > 0 and b == 0 for f, b in pairs[:2]) and
                  all(f == 0 and b > 0 for f, b in pairs[2:]) and
                  sum(f for f, _ in pairs) == sum(b for _, b in pairs),
                  f"{label}: point to point per rank {pairs}")
            check("stage 0 2 stage 1 1" in out, f"{label}: microbatches kept\n{out}")
            if "full" in flags:
                rec = re.search(r"operators recomputed in each backward pass: stage 0 (\d+)", out)
                check(rec is not None and int(rec.group(1)) > 0, f"{label}: stage 0 recomputes nothing\n{out}")
            check(re.search(r"check \d+ parameter\(s\) after 2 step", out) is not None, f"{label}: parameters checked")
    # Three stages on 3 groups of 2 (6 ranks), 4 microbatches: warm-up depths
    # 3, 2 and 1; the middle group receives and sends both ways.
    ffn = os.path.join(ROOT, "data/graphs/ffn.json")
    three = nodes_of_two("three_by_two.json", 3)
    plan3 = os.path.join(TMP, "ffn.pipeline3.plan.json")
    s = subprocess.run([BIN, "search", ffn, "--cluster", three, "--stages", "3", "--microbatches", "4",
                        "-q", "-o", plan3], capture_output=True, text=True)
    if check(s.returncode == 0, f"search --stages 3 ffn.json: {s.stderr}"):
        rc, out, err, secs = mpirun(6, [ffn, plan3, "--train", "--steps", "2", "--check", "--optimizer", "adam",
                                        "--lr", "0.001", "--timeout", "60"])
        print(f"pipeline training ffn.json 3 stages m=4 adam: 6 ranks, rc {rc}, {secs:.1f} s\n{out}", end="", flush=True)
        per_rank = re.search(r"point to point per rank \(forward/backward\): (.*)", out)
        pairs = [tuple(int(v) for v in x.split()[1].split("/")) for x in per_rank.group(1).split(", ")] \
            if per_rank else []
        check(rc == 0 and "check: passed" in out and "stage 0 3 stage 1 2 stage 2 1" in out and len(pairs) == 6
              and all(f > 0 and b > 0 for f, b in pairs[2:4]) and sum(f for f, _ in pairs) == sum(b for _, b in pairs),
              f"pipeline training, 3 stages: rc {rc} {pairs}\n{out}\n{err}")
    if "ffn.json" in plans:
        gpath, plan, pp = plans["ffn.json"]
        rc, out, err, _ = mpirun(4, [gpath, plan, "--train", "--steps", "2", "--check", "--fault", "2:boundary"])
        check(rc == 4 and "check: FAILED" in out and "gradient of" in out and "(stage 0)" in out,
              f"pipeline: doubled boundary gradient not caught: rc {rc}\n{out}\n{err}")
        op = pp["stages"][1]["range"][0]
        rc, out, err, secs = mpirun(4, [gpath, plan, "--train", "--steps", "2", "--fault", f"3:kill:{op}",
                                        "--timeout", "30"], timeout=120)
        check(rc not in (0, None) and secs < 60, f"pipeline training: kill stage rank 3: rc {rc}, {secs:.0f} s\n{err}")
    pipeline_zero3(cluster, plans)
    pipeline_tied(cluster)
    pipeline_interleaved(cluster, plans)


def pipeline_interleaved(cluster, plans):
    """Interleaved 1F1B (Megatron-LM's schedule, v stages per group): the
    small GPT-2 block on 2 groups x v 2 with 4 microbatches, a generated GPT
    (tied embedding table, ZeRO 3) with 2 microbatches (m = p), and one on 3
    groups x v 2 (6 ranks, 6 microbatches). Each checks against one device,
    every phase's bytes equal the prediction on every rank, and each group
    keeps as many chunk passes at once as the cost model's in_flight times
    v (the plan file's group_figures). The forward pass alone of each
    checks too, with its bytes. Refused (exit 2, JSON path): the forward
    pass alone of ZeRO 3 stages, and training a parameter read by two
    stages of one group."""
    three = nodes_of_two("interleaved_three_by_two.json", 3)
    gpts = {}
    for batch in (8, 12):
        gpts[batch] = os.path.join(TMP, f"interleaved_gpt_b{batch}.json")
        s = subprocess.run([BIN, "gen", "gpt", "--layers", "2", "--hidden", "32", "--heads", "4", "--seq", "16",
                            "--vocab", "64", "--batch", str(batch), "-o", gpts[batch]], capture_output=True, text=True)
        check(s.returncode == 0, f"gen gpt --batch {batch}: {s.stderr}")
    block = os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json")
    # (graph, cluster, --stages, --microbatches, ranks, more search flags)
    runs = [(block, cluster, "2x2", "4", 4, []), (gpts[8], cluster, "2x2", "2", 4, ["--zero", "3"]),
            (gpts[12], three, "3x2", "6", 6, [])]
    for gpath, clu, stages, m, n, flags in runs:
        label = f"pipeline interleaved {os.path.basename(gpath)} {stages} m={m} {' '.join(flags)}"
        plan = os.path.join(TMP, f"{os.path.basename(gpath)}.{stages}.m{m}.plan.json")
        s = subprocess.run([BIN, "search", gpath, "--cluster", clu, "--stages", stages, "--microbatches", m,
                            "-q", "-o", plan] + flags, capture_output=True, text=True)
        if not check(s.returncode == 0, f"{label}: search: {s.stderr}"):
            continue
        with open(plan) as f:
            pp = json.load(f)["pipeline"]
        v = pp["virtual_stages"]
        check(pp["schedule"] == "interleaved" and v == 2, f"{label}: not interleaved: {pp['schedule']} v {v}")
        rc, out, err, secs = mpirun(n, [gpath, plan, "--train", "--steps", "2", "--check", "--optimizer", "adam",
                                        "--lr", "0.001", "--timeout", "60"])
        print(f"{label}: {n} ranks, rc {rc}, {secs:.1f} s\n{out}", end="", flush=True)
        if not check(rc == 0 and "check: passed" in out and "every rank matches" in out
                     and "interleaved 1F1B (v 2) training" in out, f"{label}: rc {rc}\n{out}\n{err}"):
            continue
        kept = re.search(r"chunk passes whose activations a group kept at once \(interleaved: .*?, v m\)\):(.*)", out)
        expected = " ".join(f"group {g['group']} {round(g['in_flight'] * v)}" for g in pp["group_figures"])
        check(kept is not None and kept.group(1).strip() == expected,
              f"{label}: kept {kept.group(1) if kept else None}, the model's {expected}")
        if "--zero" in flags:
            check(re.search(r"ZeRO-3 shards between the passes: group 0 [1-9]", out) is not None and
                  TIED_BYTES.search(out) is not None, f"{label}: shards or tied bytes\n{out}")
        # The forward pass alone, in the schedule's order (under ZeRO 3
        # refused, as without a pipeline: it would not gather as training does).
        rc, out, err, _ = mpirun(n, [gpath, plan, "--check", "--timeout", "60"])
        if "--zero" in flags:
            check(rc == 2 and "/pipeline/stages/0/training/zero_stage" in err,
                  f"{label}: forward pass alone under ZeRO 3 not refused: rc {rc}\n{err}")
        else:
            check(rc == 0 and "check: passed" in out and "every rank matches" in out
                  and f"interleaved 1F1B (v 2) forward over {m} microbatch(es)" in out,
                  f"{label}: forward pass alone: rc {rc}\n{out}\n{err}")
    # A weight read by stages 0 and 2, both on group 0 (pinned stages).
    t = lambda name, kind=None: dict(name=name, shape=[8, 16] if name != "w" else [16, 16], dtype="f32",
                                     **({"kind": kind} if kind else {}))
    same = write("interleaved_same_group.json", {
        "format": "recsearch.graph", "version": 1, "name": "same_group",
        "tensors": [t("x", "input"), t("w", "parameter"), t("h"), t("r"), t("y"), t("r2"), t("z"), t("q")],
        "operators": [dict(name="mm1", type="MatMul", inputs=["x", "w"], outputs=["h"], attrs={"stage": 0}),
                      dict(name="act", type="ReLU", inputs=["h"], outputs=["r"], attrs={"stage": 1}),
                      dict(name="act2", type="Tanh", inputs=["r"], outputs=["r2"], attrs={"stage": 1}),
                      dict(name="mm2", type="MatMul", inputs=["r2", "w"], outputs=["y"], attrs={"stage": 2}),
                      dict(name="act3", type="ReLU", inputs=["y"], outputs=["z"], attrs={"stage": 3}),
                      dict(name="act4", type="Tanh", inputs=["z"], outputs=["q"], attrs={"stage": 3})]})
    plan = os.path.join(TMP, "same_group.plan.json")
    s = subprocess.run([BIN, "search", same, "--cluster", cluster, "--stages", "2x2", "--microbatches", "2",
                        "-q", "-o", plan], capture_output=True, text=True)
    if check(s.returncode == 0, f"search same_group 2x2: {s.stderr}"):
        rc, out, err, _ = mpirun(4, [same, plan, "--train"])
        check(rc == 2 and "/pipeline/stages" in err and "two stages of one device group" in err,
              f"a weight read by two stages of one group not refused: rc {rc}\n{err}")


def pipeline_zero3(cluster, plans):
    """Stage plans searched with --zero 3 (2 stages, 2 microbatches): each
    stage keeps some parameters as shards between the passes, gathers them
    in every microbatch's forward and backward pass, and trains to the
    one-device values; every phase's bytes equal the prediction on every
    rank. A shard gathered doubled (--fault R:gather:OP on a stage-1
    operator) fails the check."""
    if "gpt2_block_small.json" not in plans:
        return
    gpath, _, _ = plans["gpt2_block_small.json"]
    plan = os.path.join(TMP, "gpt2_block_small.zero3.pipeline.plan.json")
    s = subprocess.run([BIN, "search", gpath, "--cluster", cluster, "--stages", "2", "--microbatches", "2",
                        "--zero", "3", "-q", "-o", plan], capture_output=True, text=True)
    if not check(s.returncode == 0, f"search --stages 2 --zero 3: {s.stderr}"):
        return
    with open(plan) as f:
        pp = json.load(f)["pipeline"]
    check(all(st["training"]["zero_stage"] == 3 for st in pp["stages"]), f"zero3 pipeline: stages {pp['stages']}")
    label = "pipeline training gpt2_block_small.json --zero 3"
    rc, out, err, secs = mpirun(4, [gpath, plan, "--train", "--steps", "2", "--check", "--optimizer", "adam",
                                    "--lr", "0.001", "--timeout", "60"])
    print(f"{label}: 4 ranks, rc {rc}, {secs:.1f} s\n{out}", end="", flush=True)
    shards = re.search(r"parameters kept as ZeRO-3 shards between the passes: stage 0 (\d+) stage 1 (\d+)", out)
    check(rc == 0 and "check: passed" in out and "every rank matches" in out and shards is not None
          and int(shards.group(1)) > 0 and int(shards.group(2)) > 0, f"{label}: rc {rc}\n{out}\n{err}")
    # An operator of stage 1 that reads a weight kept as a shard.
    names = {t["name"] for t in json.load(open(gpath))["tensors"] if t.get("kind") == "parameter"}
    ops = json.load(open(gpath))["operators"]
    first, last = pp["stages"][1]["range"]
    op = next(i for i in range(first, last) if ops[i]["type"] == "MatMul" and
              any(x in names for x in ops[i]["inputs"]))
    rc, out, err, _ = mpirun(4, [gpath, plan, "--train", "--steps", "2", "--check", "--fault", f"2:gather:{op}",
                                 "--timeout", "60"])
    check(rc == 4 and "check: FAILED" in out, f"{label}: a doubled gathered shard not caught: rc {rc}\n{out}\n{err}")


TIED_BYTES = re.compile(r"gradient sync: tied parameters point to point measured (\d+), predicted (\d+), "
                        r"cost model (\d+) \((equal on every rank|differs on some rank)\)")


def pipeline_tied(cluster):
    """Parameters read by stages of several device groups (tied weights):
    each group's gradient share is summed across the groups (a ring of
    point-to-point messages between the ranks at the same place in each
    group) before the optimizer step. A weight read by both stages of a
    pinned 2-stage plan (a different layout in each stage: sharded by
    columns in one, replicated with a ZeRO 1 shard in the other) and a
    generated GPT's tied embedding table train and check; the tied bytes
    equal the prediction and the cost model's (2(k-1)/k of each rank's
    1/devices chunk). Three groups reading one weight: the ring's segments
    of ceil(chunk/3) elements send a little more than the model's 2/3 of
    the chunk, which the report says. A doubled share fails the check."""
    t = lambda name, kind=None: dict(name=name, shape=[8, 16] if name != "w" else [16, 16], dtype="f32",
                                     **({"kind": kind} if kind else {}))
    tied = write("tied.json", {
        "format": "recsearch.graph", "version": 1, "name": "tied",
        "tensors": [t("x", "input"), t("w", "parameter"), t("h"), t("r"), t("y")],
        "operators": [dict(name="mm1", type="MatMul", inputs=["x", "w"], outputs=["h"], attrs={"stage": 0}),
                      dict(name="act", type="ReLU", inputs=["h"], outputs=["r"], attrs={"stage": 0}),
                      dict(name="mm2", type="MatMul", inputs=["r", "w"], outputs=["y"], attrs={"stage": 1})]})
    gpt = os.path.join(TMP, "tied_gpt.json")
    s = subprocess.run([BIN, "gen", "gpt", "--layers", "2", "--hidden", "32", "--heads", "4", "--seq", "16",
                        "--vocab", "64", "--batch", "8", "-o", gpt], capture_output=True, text=True)
    check(s.returncode == 0, f"gen gpt: {s.stderr}")
    three = nodes_of_two("tied_three_by_two.json", 3)
    ops3 = [dict(name="mm1", type="MatMul", inputs=["x", "w"], outputs=["h"], attrs={"stage": 0}),
            dict(name="act", type="ReLU", inputs=["h"], outputs=["r"], attrs={"stage": 0}),
            dict(name="mm2", type="MatMul", inputs=["r", "w"], outputs=["y"], attrs={"stage": 1}),
            dict(name="act2", type="Tanh", inputs=["y"], outputs=["r2"], attrs={"stage": 1}),
            dict(name="mm3", type="MatMul", inputs=["r2", "w"], outputs=["z"], attrs={"stage": 2})]
    tied3 = write("tied3.json", {
        "format": "recsearch.graph", "version": 1, "name": "tied3",
        "tensors": [t("x", "input"), t("w", "parameter"), t("h"), t("r"), t("y"), t("r2"), t("z")],
        "operators": ops3})
    # (graph, cluster, stages, ranks, optimizer, lr, whether the model's bytes are exact)
    runs = [(tied, cluster, "2", 4, "sgd", "0.01", True), (tied, cluster, "2", 4, "adam", "0.01", True),
            (gpt, cluster, "2", 4, "adam", "0.001", True), (tied3, three, "3", 6, "adam", "0.001", False)]
    for gpath, clu, stages, n, optimizer, lr, exact in runs:
        label = f"pipeline tied {os.path.basename(gpath)} {optimizer}"
        plan = os.path.join(TMP, f"{os.path.basename(gpath)}.tied{stages}.plan.json")
        s = subprocess.run([BIN, "search", gpath, "--cluster", clu, "--stages", stages, "--microbatches", "2",
                            "-q", "-o", plan], capture_output=True, text=True)
        if not check(s.returncode == 0, f"{label}: search: {s.stderr}"):
            continue
        rc, out, err, secs = mpirun(n, [gpath, plan, "--train", "--steps", "3", "--check", "--optimizer",
                                        optimizer, "--lr", lr, "--timeout", "60"])
        print(f"{label}: {n} ranks, rc {rc}, {secs:.1f} s\n{out}", end="", flush=True)
        if not check(rc == 0 and "check: passed" in out and "every rank matches" in out,
                     f"{label}: rc {rc}\n{out}\n{err}"):
            continue
        m = TIED_BYTES.search(out)
        if not check(m is not None, f"{label}: no tied bytes line\n{out}"):
            continue
        meas, pred, model = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if exact:
            check(meas == pred == model > 0 and m.group(4) == "equal on every rank",
                  f"{label}: tied bytes {m.groups()}")
        else:
            # 16x16 over 2 ranks a group: chunks of 128, 3 segments of 43.
            check(meas == pred == 2 * 2 * 43 * 4 and model == round(2 * 2 / 3 * 128 * 4)
                  and m.group(4) == "differs on some rank", f"{label}: tied bytes {m.groups()}")
        if gpath == tied and optimizer == "sgd":
            rc, out, err, _ = mpirun(n, [gpath, plan, "--train", "--steps", "2", "--check", "--fault", "2:tied"])
            check(rc == 4 and "check: FAILED" in out and "gradient of w" in out,
                  f"{label}: a doubled tied share not caught: rc {rc}\n{out}\n{err}")


# ---- convolutions, pools and BatchNorm (halo exchange, SyncBatchNorm) ------

def cnn_graph(n=8, c=3, hw=16, f=8, classes=10):
    """x[n,c,hw,hw] -> Conv 3x3 pad 1 (+bias) -> BatchNorm -> ReLU -> MaxPool 2/2 ->
    grouped Conv 3x3 pad 1 (2 groups) -> BatchNorm -> ReLU -> AvgPool 3x3/1 pad 1 ->
    Conv 3x3 stride 2 pad 1 -> GlobalAvgPool -> Flatten -> MatMul -> y[n,classes]."""
    t = lambda name, shape, kind=None: dict(name=name, shape=shape, dtype="f32", **({"kind": kind} if kind else {}))
    h2, h4 = hw // 2, hw // 4
    return {"format": "recsearch.graph", "version": 1, "name": "small_cnn",
            "tensors": [t("x", [n, c, hw, hw], "input"), t("k1", [f, c, 3, 3], "parameter"),
                        t("b1", [f], "parameter"), t("g1", [f], "parameter"), t("be1", [f], "parameter"),
                        t("k2", [f, f // 2, 3, 3], "parameter"), t("g2", [f], "parameter"),
                        t("be2", [f], "parameter"), t("k3", [f, f, 3, 3], "parameter"),
                        t("fc", [f, classes], "parameter"),
                        t("c1", [n, f, hw, hw]), t("n1", [n, f, hw, hw]), t("r1", [n, f, hw, hw]),
                        t("p1", [n, f, h2, h2]), t("c2", [n, f, h2, h2]), t("n2", [n, f, h2, h2]),
                        t("r2", [n, f, h2, h2]), t("a2", [n, f, h2, h2]), t("c3", [n, f, h4, h4]),
                        t("gp", [n, f, 1, 1]), t("fl", [n, f]), t("y", [n, classes])],
            "operators": [
                dict(name="conv1", type="Conv2D", inputs=["x", "k1", "b1"], outputs=["c1"], attrs={"pads": [1, 1, 1, 1]}),
                dict(name="bn1", type="BatchNorm", inputs=["c1", "g1", "be1"], outputs=["n1"], attrs={"epsilon": 1e-5}),
                dict(name="relu1", type="ReLU", inputs=["n1"], outputs=["r1"]),
                dict(name="pool1", type="MaxPool", inputs=["r1"], outputs=["p1"],
                     attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
                dict(name="conv2", type="Conv2D", inputs=["p1", "k2"], outputs=["c2"],
                     attrs={"pads": [1, 1, 1, 1], "group": 2}),
                dict(name="bn2", type="BatchNorm", inputs=["c2", "g2", "be2"], outputs=["n2"]),
                dict(name="relu2", type="ReLU", inputs=["n2"], outputs=["r2"]),
                dict(name="pool2", type="AvgPool", inputs=["r2"], outputs=["a2"],
                     attrs={"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
                dict(name="conv3", type="Conv2D", inputs=["a2", "k3"], outputs=["c3"],
                     attrs={"pads": [1, 1, 1, 1], "strides": [2, 2]}),
                dict(name="gap", type="GlobalAvgPool", inputs=["c3"], outputs=["gp"]),
                dict(name="flat", type="Flatten", inputs=["gp"], outputs=["fl"], attrs={"axis": 1}),
                dict(name="fc", type="MatMul", inputs=["fl", "fc"], outputs=["y"])]}


HALO = re.compile(r"halo \(point to point, rank 0\): measured (\d+), predicted (\d+); largest on a rank (\d+), "
                  r"cost model (\d+)")


def halo_rows_sent(in_full, out_full, parts, block, stride, pad, extent):
    """Rows of x that block `block` of a window dim cut in `parts` sends: the
    rows of its own block that the other blocks' windows read (by hand)."""
    own = set(range(block * in_full // parts, (block + 1) * in_full // parts))
    sent = 0
    for b in range(parts):
        if b == block:
            continue
        o0, o1 = b * out_full // parts, (b + 1) * out_full // parts
        read = set()
        for o in range(o0, o1):
            read.update(r for r in range(o * stride - pad, o * stride - pad + extent) if 0 <= r < in_full)
        sent += len(read & own)
    return sent


def case_cnn():
    """Conv2D, MaxPool, AvgPool, GlobalAvgPool and BatchNorm with --check on
    hand-written plans that cut H (2 ranks; 2x2 with H split by both axes),
    H and W (2x2), the batch (2 ranks) and channels, groups and output
    channels mixed with H (2x2), and searched plans of the small CNN and of
    a shrunk ResNet-50: every output and activation equals a one-device run,
    the halo's point-to-point bytes and the collectives' bytes equal the
    prediction on every rank (exec fails otherwise), rank 0's halo and
    BatchNorm bytes equal a count by hand (training: case_cnn_train)."""
    g = cnn_graph()
    gp = write("small_cnn.json", g)
    spatial = {"conv1": ["h"], "bn1": ["h"], "relu1": ["d2"], "pool1": ["h"], "conv2": ["h"], "bn2": ["h"],
               "relu2": ["d2"], "pool2": ["h"], "conv3": ["h"], "gap": ["h"]}
    batch = {o: ["n"] for o in ("conv1", "bn1", "pool1", "conv2", "bn2", "pool2", "conv3", "gap")}
    batch.update({"relu1": ["d0"], "relu2": ["d0"], "flat": ["d0"], "fc": ["i"]})
    h_twice = {o: c + c for o, c in spatial.items()}
    hw = {"conv1": ["h", "w"], "bn1": ["h", "w"], "relu1": ["d2", "d3"], "pool1": ["h", "w"], "conv2": ["h", "w"],
          "bn2": ["n", "w"], "relu2": ["d0", "d3"], "pool2": ["h", "w"], "conv3": ["h", "w"], "gap": ["h", "w"]}
    mixed = {"conv1": ["o", "h"], "bn1": ["c", "h"], "relu1": ["d1", "d2"], "pool1": ["n", "h"], "conv2": ["g", "h"],
             "bn2": ["c", "n"], "relu2": ["d0", "d2"], "pool2": ["h", "n"], "conv3": ["c", "h"], "gap": ["n", "h"]}
    # Rank 0 of an H cut in 2: conv1 (x rows of 3x16 per image), conv2 and
    # pool2 (8x8) send one row each (3x3, stride 1, pad 1), conv3 (3x3,
    # stride 2, pad 1) one row, the 2x2/2 pool none.
    rows = [(halo_rows_sent(16, 16, 2, 0, 1, 1, 3), 8 * 3 * 16), (halo_rows_sent(8, 8, 2, 0, 1, 1, 3), 8 * 8 * 8),
            (halo_rows_sent(8, 8, 2, 0, 1, 1, 3), 8 * 8 * 8), (halo_rows_sent(8, 4, 2, 0, 2, 1, 3), 8 * 8 * 8),
            (halo_rows_sent(16, 8, 2, 0, 2, 0, 2), 8 * 8 * 16)]
    by_hand = 4 * sum(r * size for r, size in rows)
    check(by_hand == 7680, f"cnn: halo by hand {by_hand}")
    # SyncBatchNorm: two BatchNorms all-reduce 2 x 8 channel sums on 2 ranks.
    bn_by_hand = 2 * int(2 * (2 - 1) / 2 * 16 * 4)
    for label, mesh, cuts, halo in (("H on 2", [2], spatial, by_hand), ("batch on 2", [2], batch, 0),
                                    ("H by both axes of 2x2", [2, 2], h_twice, None),
                                    ("H and W on 2x2", [2, 2], hw, None),
                                    ("channels, groups and H on 2x2", [2, 2], mixed, None)):
        ranks = 1
        for m in mesh:
            ranks *= m
        pp = write(f"small_cnn_{len(FAILURES)}_{label.replace(' ', '_')}.plan.json", plan_json(g, mesh, cuts))
        rc, out, err, secs = mpirun(ranks, [gp, pp, "--check", "--timeout", "60"])
        print(f"cnn {label}: {ranks} ranks, rc {rc}, {secs:.1f} s", flush=True)
        if not check(rc == 0 and "check: passed" in out, f"cnn {label}: rc {rc}\n{out}\n{err}"):
            continue
        nums = report_numbers(out)
        check(nums["measured"] == nums["predicted"], f"cnn {label}: measured {nums['measured']} != predicted")
        m = HALO.search(out)
        if halo == 0:
            check(m is None, f"cnn {label}: a halo without a window cut\n{out}")
            check(nums["measured"] == bn_by_hand, f"cnn {label}: BatchNorm sums {nums['measured']} != {bn_by_hand}\n{out}")
        elif check(m is not None, f"cnn {label}: no halo line\n{out}"):
            measured, predicted, largest, model = (int(x) for x in m.groups())
            check(measured == predicted and measured > 0, f"cnn {label}: halo {measured} != {predicted}\n{out}")
            # The model charges every rank an inner rank's rows: never less than any rank sends.
            check(model >= largest, f"cnn {label}: the model's halo {model} < {largest}\n{out}")
            if halo is not None:
                check(measured == halo, f"cnn {label}: halo {measured}, by hand {halo}\n{out}")
        print(out, end="", flush=True)
    for name, ranks, graph, extra in (("small_cnn", 4, gp, []), ("resnet50_small", 4, None, [])):
        if graph is None:
            graph = os.path.join(TMP, "resnet50_small.json")
            subprocess.run([sys.executable, os.path.join(ROOT, "tests/exec/shrink_graph.py"),
                            os.path.join(ROOT, "data/graphs/resnet50.json"), graph, "256=4", "64=4", "128=8",
                            "512=8", "1024=16", "2048=16", "1000=10", "--name", name], check=True)
        for algo in ("rec", "data-parallel"):
            plan = os.path.join(TMP, f"{name}.{algo}.plan.json")
            s = subprocess.run([BIN, "search", graph, "--devices", str(ranks), "--algo", algo, "--zero", "0",
                                "--microbatches", "1", "-q", "-o", plan], capture_output=True, text=True)
            if check(s.returncode == 0, f"search {name} {algo}: {s.stderr}"):
                run_ok(f"{name} {algo}", ranks, graph, plan)
    spatial_plan = write("small_cnn_nccl.plan.json", plan_json(g, [2], spatial))
    # The halo exchange is point to point: MPI only.
    rc, out, err, _ = mpirun(2, [gp, spatial_plan, "--backend", "nccl"])
    check(rc == 2 and "conv1 (Conv2D)" in err and "MPI backend only" in err,
          f"cnn halo on nccl not refused: rc {rc}\n{err}")


CNN_SPATIAL = {"conv1": ["h"], "bn1": ["h"], "relu1": ["d2"], "pool1": ["h"], "conv2": ["h"], "bn2": ["h"],
               "relu2": ["d2"], "pool2": ["h"], "conv3": ["h"], "gap": ["h"]}
TRAIN_HALO = re.compile(r"halo \(point to point, rank 0\): forward measured (\d+), predicted (\d+); backward measured "
                        r"(\d+), predicted (\d+); largest on a rank (\d+)/(\d+), cost model (\d+)/(\d+)")


def case_cnn_train():
    """Training steps of CNN plans (--train --check, 2 steps): the small CNN
    cut in H on 2 ranks, in H and W on 2x2, on the batch and on channels
    (output channels, groups, input channels) on 2, channels, groups and H
    mixed on 2x2, and plans rec searches for the shrunk ResNet-50 on 4
    ranks: every step's loss, every gradient and every parameter equal a
    one-device run, and every phase's bytes, the halo's point-to-point bytes
    forward and backward included, the prediction on every rank. Rank 0's
    backward halo equals a count by hand (it sends back the gradients of
    the rows rank 1 sent it, except the first Conv's, whose input gets no
    gradient). A backward that drops the returned halo rows on one rank, or
    doubles a Conv's gradients, must fail the check."""
    g = cnn_graph()
    gp = write("small_cnn_train.json", g)
    spatial = CNN_SPATIAL
    hw = {"conv1": ["h", "w"], "bn1": ["h", "w"], "relu1": ["d2", "d3"], "pool1": ["h", "w"], "conv2": ["h", "w"],
          "bn2": ["n", "w"], "relu2": ["d0", "d3"], "pool2": ["h", "w"], "conv3": ["h", "w"], "gap": ["h", "w"]}
    batch = {o: ["n"] for o in ("conv1", "bn1", "pool1", "conv2", "bn2", "pool2", "conv3", "gap")}
    batch.update({"relu1": ["d0"], "relu2": ["d0"], "flat": ["d0"], "fc": ["i"]})
    channels = {"conv1": ["o"], "bn1": ["c"], "relu1": ["d1"], "pool1": ["c"], "conv2": ["g"], "bn2": ["c"],
                "relu2": ["d1"], "pool2": ["c"], "conv3": ["c"]}
    mixed = {"conv1": ["o", "h"], "bn1": ["c", "h"], "relu1": ["d1", "d2"], "pool1": ["n", "h"], "conv2": ["g", "h"],
             "bn2": ["c", "n"], "relu2": ["d0", "d2"], "pool2": ["h", "n"], "conv3": ["c", "h"], "gap": ["n", "h"]}
    # Rank 1 of the H cut in 2 sends rank 0, forward, one row of each of
    # conv2's and pool2's inputs (8 images x 8 channels x 8 columns), and
    # one of conv1's (x, no gradient): rank 0 returns the first two.
    rows_bwd = [(halo_rows_sent(8, 8, 2, 1, 1, 1, 3), 8 * 8 * 8), (halo_rows_sent(8, 8, 2, 1, 1, 1, 3), 8 * 8 * 8),
                (halo_rows_sent(8, 4, 2, 1, 2, 1, 3), 8 * 8 * 8), (halo_rows_sent(16, 8, 2, 1, 2, 0, 2), 8 * 8 * 16)]
    bwd_by_hand = 4 * sum(r * size for r, size in rows_bwd)
    check(bwd_by_hand == 4096, f"cnn train: backward halo by hand {bwd_by_hand}")
    plans = {}
    for label, mesh, cuts, halo_bwd in (("H on 2", [2], spatial, bwd_by_hand), ("H and W on 2x2", [2, 2], hw, None),
                                        ("batch on 2", [2], batch, 0), ("channels on 2", [2], channels, 0),
                                        ("channels, groups and H on 2x2", [2, 2], mixed, None)):
        ranks = mesh[0] * (mesh[1] if len(mesh) > 1 else 1)
        pp = write(f"small_cnn_train_{label.replace(' ', '_').replace(',', '')}.plan.json", plan_json(g, mesh, cuts))
        plans[label] = pp
        out = train_ok(f"cnn {label}", ranks, gp, pp, optimizer="sgd-momentum", steps=2)
        if out is None:
            continue
        m = TRAIN_HALO.search(out)
        if halo_bwd == 0:
            check(m is None, f"cnn train {label}: a halo without a window cut\n{out}")
        elif check(m is not None, f"cnn train {label}: no halo line\n{out}"):
            fm, fp, bm, bp, fl, bl, fmod, bmod = (int(x) for x in m.groups())
            check(fm == fp and bm == bp and fm > 0 and bm > 0, f"cnn train {label}: halo\n{out}")
            # The model charges the backward as much as the forward, an inner rank's rows.
            check(bmod >= bl, f"cnn train {label}: the model's backward halo {bmod} < {bl}\n{out}")
            if halo_bwd is not None:
                check(bm == halo_bwd, f"cnn train {label}: backward halo {bm}, by hand {halo_bwd}\n{out}")
    # ResNet-50 shrunk as case_cnn shrinks it, plans rec searches on 4 ranks
    # without latency (with it, rec replicates everything at this size): the
    # batch of 4 split by both axes (SyncBatchNorm over 2x2), 2 steps; and
    # with batch 2 (which also makes 256 channels 2), the batch on one axis,
    # the stem's channels, the classifier's inputs and the loss's classes on
    # the other, one step: after a step at this size the gradients depend on
    # the last bit of the parameters (docs/exec.md), which no two runs share.
    cost = write("cnn_train_no_latency.json", {"count_latency": False})
    # The bundled tiny conv net (batch 512 shrunk to 8), as rec plans it on 2 ranks without latency.
    conv = os.path.join(TMP, "convnet_small.json")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests/exec/shrink_graph.py"),
                    os.path.join(ROOT, "data/graphs/tiny/convnet.json"), conv, "512=8"], check=True)
    plan = os.path.join(TMP, "convnet_small.plan.json")
    s = subprocess.run([BIN, "search", conv, "--devices", "2", "--zero", "0", "--microbatches", "1", "--cost", cost,
                        "-q", "-o", plan], capture_output=True, text=True)
    if check(s.returncode == 0, f"search convnet_small: {s.stderr}"):
        train_ok("tiny convnet rec on 2", 2, conv, plan, optimizer="adam", steps=2)
    for batch, steps in (("4", 2), ("2", 1)):
        graph = os.path.join(TMP, f"resnet50_small_train_b{batch}.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests/exec/shrink_graph.py"),
                        os.path.join(ROOT, "data/graphs/resnet50.json"), graph, f"256={batch}", "64=4", "128=8",
                        "512=8", "1024=16", "2048=16", "1000=10", "--name", "resnet50_small"], check=True)
        plan = os.path.join(TMP, f"resnet50_small_b{batch}.rec.train.plan.json")
        s = subprocess.run([BIN, "search", graph, "--devices", "4", "--algo", "rec", "--zero", "0",
                            "--microbatches", "1", "--cost", cost, "-q", "-o", plan], capture_output=True, text=True)
        if check(s.returncode == 0, f"search resnet50_small batch {batch} rec: {s.stderr}"):
            out = train_ok(f"resnet50_small batch {batch} rec on 4", 4, graph, plan, optimizer="sgd", steps=steps)
            if out is not None:
                nums = train_numbers(out)
                check(nums["backward"][0] > 0, f"resnet50_small batch {batch}: nothing sent backward\n{out}")
    # Wrong backwards on rank 1 must fail the check: conv2 (operator 4)
    # dropping the gradients of its rows that rank 0's windows read (the
    # traffic still runs, so only the numbers are wrong), and conv1
    # (operator 0) doubling its gradients.
    for fault, what in (("1:halo:4", "dropped halo gradients"), ("1:grad:0", "doubled Conv gradients")):
        rc, out, err, _ = mpirun(2, [gp, plans["H on 2"], "--train", "--steps", "2", "--check", "--fault", fault])
        check(rc not in (0, None) and "check: FAILED" in out and "check gradient of" in out,
              f"cnn train: {what} not caught: rc {rc}\n{out}\n{err}")
        print(f"cnn train: {what} caught (rc {rc})", flush=True)


def case_microbatches():
    """Gradient accumulation: plans searched with --microbatches 2 or 4 run m
    forward and backward passes on batch/m and synchronise the gradients
    once; --check compares every step's loss, the accumulated gradients and
    the parameters with a one-device full-batch step. Data-parallel (ZeRO 0
    and 1) and megatron plans of ffn.json and a rec plan of the small GPT-2
    block on 2 and 4 ranks; the same data-parallel cuts with one microbatch
    sync the same bytes in the same number of all-reduces; a doubled
    gradient on one rank fails the check; without --train the plan is refused."""
    ffn = os.path.join(ROOT, "data/graphs/ffn.json")
    gpt = os.path.join(ROOT, "tests/exec/graphs/gpt2_block_small.json")
    runs = {}
    for label, graph, ranks, algo, zero, m, optimizer in (
            ("ffn data-parallel m=2", ffn, 2, "data-parallel", "0", 2, "adam"),
            ("ffn data-parallel ZeRO 1 m=2", ffn, 2, "data-parallel", "1", 2, "sgd-momentum"),
            ("ffn megatron m=4", ffn, 4, "megatron", "0", 4, "sgd-momentum"),
            ("gpt2 small rec m=2", gpt, 4, "rec", "0", 2, "adam")):
        plan = os.path.join(TMP, f"micro.{len(runs)}.plan.json")
        s = subprocess.run([BIN, "search", graph, "--devices", str(ranks), "--algo", algo, "--zero", zero,
                            "--microbatches", str(m), "-q", "-o", plan], capture_output=True, text=True)
        if not check(s.returncode == 0, f"search {label}: {s.stderr}"):
            continue
        with open(plan) as f:
            check(json.load(f)["training"]["microbatches"] == m, f"{label}: the plan lost its microbatches")
        args = [graph, plan, "--train", "--steps", "2", "--check", "--optimizer", optimizer,
                "--lr", "0.001" if optimizer == "adam" else "0.01", "--timeout", "60"]
        rc, out, err, secs = mpirun(ranks, args)
        print(f"microbatches {label}: {ranks} ranks, rc {rc}, {secs:.1f} s", flush=True)
        if not check(rc == 0 and "check: passed" in out and f"{m} microbatches accumulated" in out,
                     f"{label}: rc {rc}\n{out}\n{err}"):
            continue
        nums = train_numbers(out)
        for phase, (measured, predicted, _, _) in nums.items():
            check(measured == predicted, f"{label}: {phase} measured {measured} != predicted {predicted}")
        runs[label] = (plan, nums)
        print(out, end="", flush=True)
    # The same data-parallel cuts with one microbatch: the gradients are
    # synchronised once either way (same bytes, same all-reduces), while the
    # forward pass's loss all-reduce runs once per microbatch.
    if "ffn data-parallel m=2" in runs:
        plan, nums = runs["ffn data-parallel m=2"]
        with open(plan) as f:
            one = json.load(f)
        one["training"]["microbatches"] = 1
        one_path = write("micro.one.plan.json", one)
        rc, out, err, _ = mpirun(2, [ffn, one_path, "--train", "--steps", "2", "--check", "--timeout", "60"])
        if check(rc == 0 and "check: passed" in out, f"one microbatch: rc {rc}\n{out}\n{err}"):
            single = train_numbers(out)
            check(nums["gradient sync"][0] == single["gradient sync"][0] > 0 and
                  nums["gradient sync"][3] == single["gradient sync"][3],
                  f"accumulated sync {nums['gradient sync']} != one microbatch's {single['gradient sync']}")
            check(nums["gradient sync"][0] == nums["gradient sync"][2],
                  f"accumulated sync {nums['gradient sync']}: not the cost model's")
            check(nums["forward"][0] == 2 * single["forward"][0] and nums["forward"][3][1] == 2 * single["forward"][3][1],
                  f"forward per microbatch: {nums['forward']} against {single['forward']}")
        rc, out, err, _ = mpirun(2, [ffn, plan, "--train", "--steps", "2", "--check", "--fault", "1:grad:3"])
        check(rc == 4 and "check: FAILED" in out and "gradient of" in out,
              f"microbatches: wrong gradient not caught: rc {rc}\n{out}\n{err}")
        rc, out, err, _ = mpirun(2, [ffn, plan])
        check(rc == 2 and "--train" in err and "microbatches" in err,
              f"microbatches without --train not refused: rc {rc}\n{out}\n{err}")


# ---- activation recomputation (--train with a plan that recomputes) --------

RECOMPUTE_LINE = re.compile(r"recomputation (\S+(?: operator)?): (\d+) operator\(s\) in (\d+) group\(s\)")
AGAIN_LINE = re.compile(r"recomputed forward, bytes sent in the backward \(rank 0\): collectives measured (\d+), "
                        r"predicted (\d+), cost model 0; point to point measured (\d+), predicted (\d+)")
HELD_LINE = re.compile(r"activations held for the backward \(rank 0, bytes\): after the forward (\d+), "
                       r"peak in the backward (\d+); cost model (\d+)")


def recompute_numbers(out):
    """(recomputed operators, groups, held after the forward, peak, model) or None."""
    r, h = RECOMPUTE_LINE.search(out), HELD_LINE.search(out)
    if r is None or h is None:
        return None
    return int(r.group(2)), int(r.group(3)), int(h.group(1)), int(h.group(2)), int(h.group(3))


def case_recompute():
    """Recomputation: a 2-layer GPT (explicit attention, f32) trained with
    plans searched with --recompute none, selective and full (megatron on 2
    and on 2x2 ranks, data-parallel on 2 with 2 microbatches): every step's
    loss, gradient and parameter equal a one-device run without
    recomputation, every phase's bytes the prediction from the layouts (the
    backward with the recomputed forward's collectives: more than without
    recomputation where megatron's forward sends), the same loss whatever
    the setting, and the activations held after the forward fall from none
    to selective to full, as the cost model's do. The small CNN cut in H
    with full recomputation reruns halo exchanges and SyncBatchNorm's
    statistics, counted. A recomputed forward that doubles a Softmax's
    output on one rank fails the check (without recomputation it changes
    nothing: the values recomputed are the ones the backward uses). A plan
    that recomputes per operator (recompute_ops) trains as well."""
    gpt = os.path.join(TMP, "gpt_recompute.json")
    s = subprocess.run([BIN, "gen", "gpt", "--layers", "2", "--hidden", "32", "--heads", "2", "--seq", "32",
                        "--vocab", "64", "--batch", "4", "--dtype", "f32", "-q", "-o", gpt],
                       capture_output=True, text=True)
    if not check(s.returncode == 0, f"gen gpt: {s.stderr}"):
        return
    plans = {}
    for algo, ranks, m in (("megatron", 2, 1), ("megatron", 4, 1), ("data-parallel", 2, 2)):
        runs = {}
        for mode in ("none", "selective", "full"):
            plan = os.path.join(TMP, f"recompute.{algo}.{ranks}.{mode}.plan.json")
            s = subprocess.run([BIN, "search", gpt, "--devices", str(ranks), "--algo", algo, "--zero", "0",
                                "--microbatches", str(m), "--recompute", mode, "-q", "-o", plan],
                               capture_output=True, text=True)
            if not check(s.returncode == 0, f"search {algo} {ranks} --recompute {mode}: {s.stderr}"):
                continue
            plans[(algo, ranks, mode)] = plan
            out = train_ok(f"recompute {mode}, {algo} on {ranks}, {m} microbatch(es)", ranks, gpt, plan,
                           optimizer="adam", steps=2)
            if out is None:
                continue
            nums = recompute_numbers(out)
            if not check(nums is not None and f"recomputation {mode}" in out, f"recompute {mode}: report\n{out}"):
                continue
            losses = re.search(r"of the others\):\s+([^\n]+)", out).group(1)
            again = AGAIN_LINE.search(out)
            if mode != "none" and check(again is not None, f"recompute {mode}: no recomputed bytes\n{out}"):
                cm, cp, pm, pp = (int(x) for x in again.groups())
                check(cm == cp and pm == pp, f"recompute {mode}: recomputed bytes {cm}/{cp}, {pm}/{pp}")
                # Megatron's fully recomputed layers all-reduce their row-parallel outputs again.
                check(cm > 0 if (algo, mode) == ("megatron", "full") else True,
                      f"recompute {mode}: nothing sent again\n{out}")
            runs[mode] = (nums, train_numbers(out), losses)
        if len(runs) != 3:
            continue
        label = f"{algo} on {ranks}"
        (ops_n, _, held_n, peak_n, model_n), bytes_n, loss_n = runs["none"]
        (ops_s, groups_s, held_s, _, model_s), bytes_s, loss_s = runs["selective"]
        (ops_f, groups_f, held_f, peak_f, model_f), bytes_f, loss_f = runs["full"]
        check(ops_n == 0 and peak_n == held_n, f"{label}: recomputation none reran operators")
        # Two attention cores of 6 operators; full: segments of both layers.
        check(ops_s == 12 and groups_s == 2, f"{label}: selective reran {ops_s} operators in {groups_s} groups")
        check(ops_f > ops_s and groups_f >= 2, f"{label}: full reran {ops_f} operators in {groups_f} groups")
        check(held_f < held_s < held_n and model_f < model_s < model_n,
              f"{label}: held after the forward {held_n}/{held_s}/{held_f}, model {model_n}/{model_s}/{model_f}")
        check(peak_f < peak_n, f"{label}: full's peak {peak_f} not below none's {peak_n}")
        check(loss_n == loss_s == loss_f, f"{label}: losses {loss_n} / {loss_s} / {loss_f}")
        check(bytes_n["forward"][0] == bytes_s["forward"][0] == bytes_f["forward"][0],
              f"{label}: forward bytes differ between settings")
        if algo == "megatron":
            check(bytes_f["backward"][0] > bytes_n["backward"][0],
                  f"{label}: full recomputation sent no more in the backward than none")
        print(f"recompute {label}: held after the forward none/selective/full {held_n}/{held_s}/{held_f}, "
              f"peak {peak_n}/{runs['selective'][0][3]}/{peak_f}; cost model {model_n}/{model_s}/{model_f}",
              flush=True)
    # Per operator (the plan file's recompute_ops, as the search writes it
    # for a stack): the first layer's attention core selective, the second
    # layer fully recomputed, the rest kept.
    if ("megatron", 2, "none") in plans:
        with open(plans[("megatron", 2, "none")]) as f:
            doc = json.load(f)
        names = [o["name"] for o in json.load(open(gpt))["operators"]]
        doc["training"]["recompute_ops"] = {n: "selective" if n.startswith("h0.") else "full"
                                            for n in names if n.startswith(("h0.", "h1."))}
        out = train_ok("recompute per operator, megatron on 2", 2, gpt, write("recompute_mixed.plan.json", doc),
                       optimizer="sgd", steps=2)
        nums = recompute_numbers(out or "")
        layer = sum(n.startswith("h1.") for n in names)
        check(nums is not None and "recomputation per operator" in out and nums[0] == 6 + layer,
              f"recompute per operator: {nums}, want {6 + layer} operators\n{out}")
    # The small CNN cut in H on 2 ranks, fully recomputed: halo exchanges
    # and batch statistics run again inside the backward pass.
    g = cnn_graph()
    gp = write("small_cnn_recompute.json", g)
    doc = plan_json(g, [2], CNN_SPATIAL)
    doc["mode"] = "train"
    doc["training"] = {"recompute": "full", "zero_stage": 0, "microbatches": 1}
    cp = write("small_cnn_recompute.plan.json", doc)
    out = train_ok("recompute full, cnn H on 2", 2, gp, cp, optimizer="sgd-momentum", steps=2)
    if out is not None:
        nums, halo = recompute_numbers(out), TRAIN_HALO.search(out)
        doc["training"]["recompute"] = "none"
        rc, plain, err, _ = mpirun(2, [gp, write("small_cnn_plain.plan.json", doc), "--train", "--steps", "2",
                                       "--check"])
        halo_plain = TRAIN_HALO.search(plain)
        if check(rc == 0 and nums and halo and halo_plain, f"cnn recompute: rc {rc}\n{out}\n{plain}\n{err}"):
            again = AGAIN_LINE.search(out)
            check(nums[0] > 0 and int(halo.group(3)) > int(halo_plain.group(3)) and again is not None and
                  int(again.group(3)) == int(halo.group(3)) - int(halo_plain.group(3)) > 0 and
                  int(again.group(1)) > 0,
                  f"cnn recompute: no halo or statistics exchanged again in the backward\n{out}\n{plain}")
    # A recomputation that does not reproduce the forward pass.
    softmax = next(i for i, o in enumerate(json.load(open(gpt))["operators"]) if o["type"] == "Softmax")
    for mode, caught in (("selective", True), ("full", True), ("none", False)):
        plan = plans.get(("megatron", 2, mode))
        if plan is None:
            continue
        rc, out, err, _ = mpirun(2, [gpt, plan, "--train", "--steps", "2", "--check", "--fault",
                                     f"1:recompute:{softmax}"])
        if caught:
            check(rc == 4 and "check: FAILED" in out and "check gradient of" in out,
                  f"recompute {mode}: a wrong recomputed Softmax not caught: rc {rc}\n{out}\n{err}")
        else:
            check(rc == 0 and "check: passed" in out, f"recompute none: the fault changed something: rc {rc}\n{out}")


CASES = {"kinds": case_kinds, "vocab": case_vocab_parallel, "bundled": case_bundled, "failures": case_failures, "nccl": case_nccl,
         "train": case_train, "layout_kinds": case_layout_kinds, "phases": case_phases,
         "buckets": case_buckets, "pipeline": case_pipeline, "cnn": case_cnn, "cnn_train": case_cnn_train,
         "microbatches": case_microbatches, "recompute": case_recompute, "zero3": case_zero3}


def main(argv):
    global BIN, ROOT, TMP
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    BIN, ROOT = os.path.abspath(argv[0]), argv[1]
    if shutil.which("mpirun") is None:
        print("mpirun not found: skipped")
        return 77
    names = argv[2:] or list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        TMP = tmp
        for name in names:
            if CASES[name]() == 77 and len(names) == 1:
                return 77
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
