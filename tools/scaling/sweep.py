#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Scaling experiments: sweep operators and devices, write CSV and plots.

Each point runs `scale_probe` (one process per point, so peak RSS is the
point's own) on a graph from `recsearch gen`, written to a file so that the
parse is measured too; the largest points are generated in memory instead
(--in-memory-from), which leaves parse_s at the generator's time. Points
read from a file are also timed end to end: the CLI, `recsearch search FILE
... -q -o plan.json`, its wall and CPU (user + system) seconds, peak RSS
and plan size (e2e_* columns; --no-e2e skips it).

    tools/scaling/sweep.py --build build            # full sweep (about 10 min)
    tools/scaling/sweep.py --build build --quick    # the meson benchmark subset

Outputs in --out (default tools/scaling/results): ops.csv, devices.csv,
summary.txt (fitted exponents), and ops.svg / devices.svg when matplotlib is
available (Debian: python3-matplotlib, run with /usr/bin/python3).
"""
import argparse
import csv
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

FIELDS = ["family", "ops", "tensors", "devices", "mesh", "file_bytes", "parse_s", "spaces_s",
          "search_s", "eval_s", "rungs", "peak_rss_mib", "graph_mib", "spaces_mib", "step_time_s",
          "fold_period", "fold_repeats", "parse_cpu_s", "spaces_cpu_s", "search_cpu_s", "load",
          "e2e_s", "e2e_cpu_s", "e2e_rss_mib", "plan_bytes"]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"sweep: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def probe(args, source, cluster):
    out = run([args.probe, source, *cluster, "--threads", str(args.threads)])
    # cluster is ['--mesh', X] or ['--devices', N, ...]
    return json.loads(out.strip().splitlines()[-1])


def end_to_end(args, path, cluster, tmp):
    """The CLI on the graph file, the plan written to a file: wall, CPU and peak RSS of that process."""
    plan = os.path.join(tmp, "plan.json")
    cmd = [args.recsearch, "search", path, *cluster, "--threads", str(args.threads), "-q", "-o", plan]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"sweep: {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.read().decode().strip()}")
    size = os.path.getsize(plan)
    os.remove(plan)
    return {"e2e_s": wall, "e2e_cpu_s": usage.ru_utime + usage.ru_stime,
            "e2e_rss_mib": usage.ru_maxrss / 1024.0, "plan_bytes": size}


def point(args, family, spec, cluster, tmp, in_memory):
    """spec: dict of gen options; cluster: ['--mesh', '64x64'] or ['--devices', 'N']."""
    if in_memory:
        source = "gen:" + family + ":" + ",".join(f"{k}={v}" for k, v in spec.items())
    else:
        path = os.path.join(tmp, "g.json")
        opts = [x for k, v in spec.items() for x in (f"--{k}", str(v))]
        run([args.recsearch, "gen", family, *opts, "-q", "-o", path])
        source = path
    r = probe(args, source, cluster)
    if not in_memory and args.e2e:
        r.update(end_to_end(args, source, cluster, tmp))
    r["load"] = os.getloadavg()[0]
    row = {k: r.get(k, "") for k in FIELDS}
    row["family"] = family
    row["mesh"] = cluster[1]
    row["in_memory"] = int(in_memory)
    print(f"  {family:6} ops={r['ops']:>9} devices={r['devices']:>8} parse={r['parse_s']:.2f}s "
          f"(cpu {r['parse_cpu_s']:.2f}) search={r['search_s']:.2f}s (cpu {r['search_cpu_s']:.2f}) "
          f"rss={r['peak_rss_mib']:.0f}MiB"
          + (f" e2e={r['e2e_s']:.2f}s (cpu {r['e2e_cpu_s']:.2f}, {r['e2e_rss_mib']:.0f}MiB)"
             if "e2e_s" in r else "")
          + f" load={r['load']:.1f}", flush=True)
    return row


def fit(xs, ys):
    """Least-squares slope and intercept of ys on xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return float("nan"), my
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return b, my - b * mx


def write_csv(path, rows):
    keys = FIELDS + ["in_memory"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in keys})


def plot(out, ops_rows, dev_rows, fits):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sweep: matplotlib not found (Debian: python3-matplotlib, run with /usr/bin/python3); "
              "no plots written", file=sys.stderr)
        return []
    written = []
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for fam in sorted({r["family"] for r in ops_rows}):
        rs = [r for r in ops_rows if r["family"] == fam]
        ax.loglog([r["ops"] for r in rs], [r["search_cpu_s"] for r in rs], "o-",
                  label=f"{fam}: search (exponent {fits.get(fam, float('nan')):.2f})")
        ax.loglog([r["ops"] for r in rs], [r["parse_cpu_s"] for r in rs], "x--", label=f"{fam}: parse")
    ax.set_xlabel("operators")
    ax.set_ylabel("CPU seconds (one thread)")
    ax.set_title("recsearch: time against operators (64x64 mesh)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = os.path.join(out, "ops.svg")
    fig.savefig(p)
    written.append(p)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.semilogx([r["devices"] for r in dev_rows], [r["search_cpu_s"] for r in dev_rows], "o-",
                base=2, label="search")
    ax.set_xlabel("devices (flat cluster)")
    ax.set_ylabel("CPU seconds (one thread)")
    ax.set_title(f"recsearch: time against devices ({dev_rows[0]['ops']} operators)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = os.path.join(out, "devices.svg")
    fig.savefig(p)
    written.append(p)
    plt.close(fig)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="Meson build folder")
    ap.add_argument("--out", default=None, help="output folder (default tools/scaling/results)")
    ap.add_argument("--quick", action="store_true", help="small subset (meson benchmark)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-e2e", dest="e2e", action="store_false",
                    help="skip the end-to-end CLI run of each point read from a file")
    ap.add_argument("--max-ops", type=float, default=1.1e7, help="largest operator count to run")
    ap.add_argument("--in-memory-from", type=float, default=3e6,
                    help="generate graphs of at least this many operators in memory (no file)")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args.recsearch = os.path.join(args.build, "tools", "recsearch", "recsearch")
    args.probe = os.path.join(args.build, "tools", "scaling", "scale_probe")
    for exe in (args.recsearch, args.probe):
        if not os.access(exe, os.X_OK):
            sys.exit(f"sweep: {exe} not found; build first (ninja -C {args.build})")
    out = args.out or (os.path.join(tempfile.gettempdir(), "recsearch-scaling-quick") if args.quick
                       else os.path.join(root, "tools", "scaling", "results"))
    os.makedirs(out, exist_ok=True)

    # GPT at 33 operators a layer: 30 layers ~ 10^3 operators, 303,000 ~ 10^7.
    gpt = {"hidden": 1024, "heads": 16, "seq": 1024, "batch": 16}
    if args.quick:
        gpt_layers = [30, 300, 3000]
        random_ops = [1000, 10000, 30000]
        devices = [2, 8, 96, 1024, 65536]
        dev_layers = 300
    else:
        gpt_layers = [30, 100, 300, 1000, 3000, 10000, 30300, 100000, 303000]
        random_ops = [1000, 3000, 10000, 30000, 100000, 300000, 1000000]
        devices = [2, 3, 8, 12, 64, 96, 1000, 1024, 4096, 65536, 1 << 20]
        dev_layers = 3000
    start = time.time()
    ops_rows, dev_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        print("operators (GPT, 64x64 mesh):", flush=True)
        for layers in gpt_layers:
            if layers * 33 > args.max_ops:
                break
            ops_rows.append(point(args, "gpt", dict(gpt, layers=layers), ["--mesh", "64x64"], tmp,
                                  layers * 33 >= args.in_memory_from))
        print("operators (random DAG, not foldable, 64x64 mesh, no memory budget):", flush=True)
        for n in random_ops:
            if n > args.max_ops:
                break
            # No memory budget: the random DAG's memory grows with it, and the
            # number of memory rungs with that, which would blur the growth
            # of one search (GPT above keeps the budget).
            ops_rows.append(point(args, "random", {"ops": n, "seed": 1},
                                  ["--mesh", "64x64", "--memory", "1e9"], tmp,
                                  n >= args.in_memory_from))
        print(f"devices (GPT, {dev_layers} layers, flat clusters):", flush=True)
        for d in devices:
            # No memory budget: two devices cannot hold the model, and the
            # point is the search's growth in devices.
            dev_rows.append(point(args, "gpt", dict(gpt, layers=dev_layers),
                                  ["--devices", str(d), "--memory", "1e9"], tmp, False))
    write_csv(os.path.join(out, "ops.csv"), ops_rows)
    write_csv(os.path.join(out, "devices.csv"), dev_rows)

    # Growth exponents over the points of at least 10^4 operators (below,
    # fixed costs dominate), and the slope in log2(devices).
    fits, lines = {}, []
    for fam in sorted({r["family"] for r in ops_rows}):
        pts = [(r["ops"], r["search_cpu_s"]) for r in ops_rows if r["family"] == fam and r["ops"] >= 1e4]
        if len(pts) >= 2:
            b, _ = fit([math.log(x) for x, _ in pts], [math.log(max(y, 1e-6)) for _, y in pts])
            fits[fam] = b
            lines.append(f"{fam}: search CPU time ~ operators^{b:.3f} (from {len(pts)} points >= 1e4 ops)")
        pp = [(r["ops"], r["parse_cpu_s"]) for r in ops_rows
              if r["family"] == fam and r["ops"] >= 1e4 and not r["in_memory"]]
        if len(pp) >= 2:
            b, _ = fit([math.log(x) for x, _ in pp], [math.log(max(y, 1e-6)) for _, y in pp])
            lines.append(f"{fam}: parse CPU time ~ operators^{b:.3f}")
    if len(dev_rows) >= 2:
        b, a = fit([math.log2(r["devices"]) for r in dev_rows], [r["search_cpu_s"] for r in dev_rows])
        e, _ = fit([math.log(r["devices"]) for r in dev_rows],
                   [math.log(max(r["search_cpu_s"], 1e-6)) for r in dev_rows])
        lines.append(f"devices: search CPU time ~ {a:.3f} + {b:.4f} * log2(devices) s "
                     f"(log-log exponent {e:.3f})")
    loads = [r["load"] for r in ops_rows + dev_rows]
    lines.append(f"machine: {platform.machine()}, {os.cpu_count()} cpus, "
                 f"threads {args.threads}; load average {min(loads):.1f}-{max(loads):.1f} during the "
                 f"sweep; sweep took {time.time() - start:.0f} s; fits use CPU seconds")
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    for p in plot(out, ops_rows, dev_rows, fits):
        print(f"wrote {p}")
    print(f"wrote {out}/ops.csv, devices.csv, summary.txt")


if __name__ == "__main__":
    main()
