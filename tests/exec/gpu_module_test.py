#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests of the GPU module split (meson suite `exec`): CUDA, cuBLAS and NCCL
live only in librecsearch_gpu.so, which the execution layer dlopens when a
GPU backend is asked for.

Cases:
  unlinked  the recsearch executable and the exec library's test consumer
            have no CUDA/cuBLAS/NCCL among their ELF dependencies (ldd), and
            `recsearch --version` loads none of them (LD_DEBUG=libs).
  module    the module exports exactly one dynamic symbol, recsearch_gpu_api;
            it links cudart and cublas (and nccl in NCCL builds); called
            through ctypes it hands out the interface version of
            src/exec/gpu_api.h and refuses any other version.
  load      `recsearch exec --backend nccl` with RECSEARCH_GPU_MODULE at a
            missing file, at a library that is not the module, and at the
            module, on 2 ranks: the first two end with exit 4 and a message
            naming the path; with the module, libcudart is loaded on demand
            and the run either ends with "no usable GPU" (exit 4) or runs.
  archs     the module holds machine code (ELF/SASS) for every architecture
            of the gpu_archs option (RECSEARCH_GPU_ARCHS, default 80,90)
            and PTX of the highest, read with `cuobjdump --list-elf` and
            `--list-ptx`; where cuobjdump is absent, from the module's
            .nv_fatbin section directly. Skipped (77) without a module, or
            with neither cuobjdump nor objcopy.
  fake      `recsearch exec --backend nccl` with a stand-in module
            (MODULE_PATH: fake_gpu_module.so, RECSEARCH_FAKE_GPUS devices):
            one rank on one device runs and passes --check, binding local
            rank 0; two ranks on one device are refused on every rank with
            "no usable GPU: 2 ranks share 1 device(s)" before the module
            opens NCCL (the NCCL test's skip); two ranks on two devices open
            local ranks 0 and 1; no device is "no usable GPU".
  calibrate `recsearch calibrate --backend nccl` with the stand-in module,
            whose timings report a device of known figures and a link of
            RECSEARCH_FAKE_LINK: on two ranks the cluster file holds those
            figures (the bf16, f32 and tf32 GEMM rates, the copy bandwidth,
            the memory, one level "gpu" of 2 at the link's latency and
            bandwidth) and a search reads it; one rank measures the device
            alone and refuses -o (exit 2); a collective that fails ends
            every rank with exit 4 and its message.

Usage: gpu_module_test.py RECSEARCH_BINARY EXEC_TEST_BINARY MODULE_PATH CASE
MODULE_PATH is empty in builds without CUDA (module and load skip, 77).
"""
import ctypes
import ctypes.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

GPU_LIBS = re.compile(r"lib(cudart|cublas|cublasLt|nccl)\.so")
FAILURES = []
GPU_API_H = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "exec",
                         "gpu_api.h")


def abi_version():
    """kRecsearchGpuAbiVersion as src/exec/gpu_api.h defines it."""
    with open(GPU_API_H) as f:
        return int(re.search(r"kRecsearchGpuAbiVersion = (\d+)", f.read()).group(1))


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


def ldd(path):
    return subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout


def loaded_libs(cmd, env):
    """Runs cmd with LD_DEBUG=libs; returns (rc, stdout, the sonames the
    dynamic loader opened, stderr without the loader's lines)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(env, LD_DEBUG="libs"),
                       timeout=240)
    opened = set()
    rest = []
    for line in p.stderr.splitlines():
        m = re.match(r"\s*\d+:\s+calling init: (\S+)", line)
        if m:
            opened.add(os.path.basename(m.group(1)))
        elif not re.match(r"\s*\d+:", line):
            rest.append(line)
    return p.returncode, p.stdout, opened, "\n".join(rest)


def case_unlinked(exe, consumer, _module):
    for path in (exe, consumer):
        deps = ldd(path)
        check(not GPU_LIBS.search(deps), f"{path} links a GPU library:\n{deps}")
    rc, out, opened, _ = loaded_libs([exe, "--version"], os.environ)
    check(rc == 0 and out.startswith("recsearch "), f"--version: rc {rc}, {out!r}")
    # The loader trace must work at all, or the next check proves nothing.
    check(any(s.startswith("libc.so") for s in opened), f"LD_DEBUG saw no libc: {opened}")
    gpu = sorted(s for s in opened if GPU_LIBS.search(s))
    check(not gpu, f"--version loaded {gpu}")
    return 0


def case_module(_exe, _consumer, module):
    if not module:
        print("this build has no CUDA, so no GPU module: skipped")
        return 77
    syms = subprocess.run(["nm", "-D", "--defined-only", module], capture_output=True,
                          text=True, check=True).stdout.split("\n")
    names = sorted(line.split()[-1] for line in syms if line.strip())
    check(names == ["recsearch_gpu_api"], f"module exports {names}")
    deps = ldd(module)
    for lib in ("libcudart", "libcublas"):
        check(lib in deps, f"the module does not link {lib}:\n{deps}")
    check("libmpi" not in deps, f"the module links MPI:\n{deps}")
    lib = ctypes.CDLL(module)
    fn = lib.recsearch_gpu_api
    fn.restype = ctypes.POINTER(ctypes.c_int)
    fn.argtypes = [ctypes.c_int]
    version = abi_version()
    api = fn(version)
    check(bool(api) and api[0] == version,
          f"recsearch_gpu_api({version}) does not give interface version {version}")
    if api:
        check(api[1] in (0, 1), f"has_nccl is {api[1]}")
        check(api[1] == (1 if "libnccl" in deps else 0), f"has_nccl {api[1]} but ldd:\n{deps}")
    for wrong in (0, version - 1, version + 1, 999):
        check(not fn(wrong), f"recsearch_gpu_api({wrong}) is not null")
    return 0


def mpi_exec_test(module, missing):
    """exec_test (the graph and plan builders of the mpirun tests), or None
    after saying why the case is skipped: no module (`missing`) or no mpirun."""
    if not module:
        print(f"{missing}: skipped")
        return None
    if shutil.which("mpirun") is None:
        print("mpirun not found: skipped")
        return None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import exec_test
    return exec_test


def case_load(exe, _consumer, module):
    exec_test = mpi_exec_test(module, "this build has no CUDA, so no GPU module")
    if exec_test is None:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        exec_test.TMP = tmp
        g = exec_test.chain_graph(8, 16, 24, 4)
        gp = exec_test.write("chain.json", g)
        pp = exec_test.write("chain_2.plan.json", exec_test.plan_json(g, [2], exec_test.ONE_AXIS))
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", exe, "exec", gp, pp,
               "--backend", "nccl", "--timeout", "60"]
        env = dict(exec_test.ENV)

        missing = os.path.join(tmp, "no_such_module.so")
        rc, _, opened, err = loaded_libs(cmd, dict(env, RECSEARCH_GPU_MODULE=missing))
        check(rc == 4 and "no usable GPU: cannot load the GPU module" in err and missing in err,
              f"missing module: rc {rc}\n{err}")
        check(not any(GPU_LIBS.search(s) for s in opened), f"missing module, loaded {opened}")

        libc = ctypes.util.find_library("c")
        rc, _, _, err = loaded_libs(cmd, dict(env, RECSEARCH_GPU_MODULE=libc))
        check(rc == 4 and f"the GPU module {libc} does not export recsearch_gpu_api" in err,
              f"not a module: rc {rc}\n{err}")

        rc, out, opened, err = loaded_libs(cmd, dict(env, RECSEARCH_GPU_MODULE=module))
        check(any(s.startswith("libcudart") for s in opened),
              f"--backend nccl did not load libcudart: {sorted(opened)}")
        check((rc == 4 and "no usable GPU:" in err) or rc == 0, f"module: rc {rc}\n{out}\n{err}")
        said = [line for line in err.splitlines() if line.startswith("recsearch exec:")]
        print(f"--backend nccl with the module: rc {rc}; {said[0] if said else out.strip()}")
    return 0


def fatbin_codes(module):
    """(ELF archs, PTX archs) of the fat binaries in the module's .nv_fatbin
    section, read without cuobjdump. A fat binary is a 16-byte header (magic
    0xBA55ED50, u16 version, u16 header size, u64 size of the entries) and
    entries, each a header (u16 kind: 1 PTX, 2 ELF; u16; u32 header size; u64
    payload size; u32; u32; u16 minor; u16 major; u32 arch, e.g. 90) and its
    payload. None when the section cannot be read."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fatbin")
        p = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", module, out],
                           capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(out):
            return None
        with open(out, "rb") as f:
            data = f.read()
    elf, ptx = set(), set()
    pos = 0
    while pos + 16 <= len(data):
        magic, _version, header, size = struct.unpack_from("<IHHQ", data, pos)
        if magic != 0xBA55ED50:
            pos += 8  # containers are 8-byte aligned, padding between them
            continue
        entry, end = pos + header, pos + header + size
        while entry + 32 <= end:
            kind, _, ehead, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            (elf if kind == 2 else ptx if kind == 1 else set()).add(arch)
            if ehead == 0:
                break
            entry += ehead + payload
        pos = end
    return elf, ptx


def case_archs(_exe, _consumer, module):
    if not module:
        print("this build has no CUDA, so no GPU module: skipped")
        return 77
    if not os.path.exists(module):
        print(f"{module} is not built: skipped")
        return 77
    want = [int(a) for a in os.environ.get("RECSEARCH_GPU_ARCHS", "80,90").split(",") if a]
    if shutil.which("cuobjdump"):
        listed = lambda what: subprocess.run(["cuobjdump", what, module], capture_output=True,
                                             text=True).stdout
        elf = {int(m) for m in re.findall(r"\.sm_(\d+)\.cubin", listed("--list-elf"))}
        ptx = {int(m) for m in re.findall(r"\.sm_(\d+)\.ptx", listed("--list-ptx"))}
        how = "cuobjdump"
    elif shutil.which("objcopy"):
        codes = fatbin_codes(module)
        check(codes is not None, f"{module} has no readable .nv_fatbin section")
        elf, ptx = codes or (set(), set())
        how = ".nv_fatbin (no cuobjdump)"
    else:
        print("neither cuobjdump nor objcopy: skipped")
        return 77
    print(f"{how}: ELF for sm_{sorted(elf)}, PTX for compute_{sorted(ptx)}; want ELF {want}, "
          f"PTX {max(want)}")
    for a in want:
        check(a in elf, f"the module has no machine code for sm_{a}: ELF {sorted(elf)}")
    check(max(want) in ptx, f"the module has no PTX for compute_{max(want)}: PTX {sorted(ptx)}")
    return 0


def case_fake(exe, _consumer, fake):
    exec_test = mpi_exec_test(fake, "this build has no NCCL backend")
    if exec_test is None:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        exec_test.TMP = tmp
        g = exec_test.chain_graph(8, 16, 24, 4)
        gp = exec_test.write("chain.json", g)
        one = os.path.join(tmp, "chain_1.plan.json")
        s = subprocess.run([exe, "search", gp, "--devices", "1", "-q", "-o", one],
                           capture_output=True, text=True)
        check(s.returncode == 0, f"search for one device: {s.stderr}")
        two = exec_test.write("chain_2.plan.json", exec_test.plan_json(g, [2], exec_test.ONE_AXIS))

        def run(ranks, plan, gpus):
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), exe,
                   "exec", gp, plan, "--backend", "nccl", "--check", "--timeout", "60"]
            env = dict(exec_test.ENV, RECSEARCH_GPU_MODULE=fake, RECSEARCH_FAKE_GPUS=str(gpus))
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
            opened = sorted(re.findall(r"fake nccl_open: rank \d+ of \d+, local rank (\d+ of \d+)",
                                       p.stderr))
            print(f"{ranks} rank(s), {gpus} device(s): rc {p.returncode}, opened {opened}")
            return p.returncode, p.stdout, p.stderr, opened

        rc, out, err, opened = run(1, one, 1)
        check(rc == 0 and "check: passed" in out and opened == ["0 of 1"],
              f"one rank, one device: rc {rc}, opened {opened}\n{out}\n{err}")
        check(exec_test.nccl_status(rc, err) == "ran", "one rank, one device: not a run")

        rc, out, err, opened = run(2, two, 1)
        refused = re.findall(r"\[rank (\d)\] no usable GPU: 2 ranks share 1 device\(s\) on this node",
                             err)
        check(rc == 4 and sorted(refused) == ["0", "1"] and not opened,
              f"two ranks, one device: rc {rc}, refused on {refused}, opened {opened}\n{err}")
        check(exec_test.nccl_status(rc, err) == "shared", "two ranks, one device: not 'shared'")

        rc, out, err, opened = run(2, two, 2)
        check(opened == ["0 of 2", "1 of 2"] and rc == 4 and
              "the fake GPU module has no collectives" in err,
              f"two ranks, two devices: rc {rc}, opened {opened}\n{err}")

        rc, out, err, opened = run(1, one, 0)
        check(rc == 4 and "no usable GPU: no CUDA device" in err and not opened,
              f"no device: rc {rc}, opened {opened}\n{err}")
        check(exec_test.nccl_status(rc, err) == "no-gpu", "no device: not 'no-gpu'")
    return 0


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def case_calibrate(exe, _consumer, fake):
    exec_test = mpi_exec_test(fake, "this build has no NCCL backend")
    if exec_test is None:
        return 77
    latency, bandwidth = 3e-6, 5e10  # the fake link: 3 us per step, 50 GB/s
    with tempfile.TemporaryDirectory() as tmp:
        def run(ranks, extra, link=True):
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), exe,
                   "calibrate", "--backend", "nccl", "--np", str(ranks), "--reps", "2",
                   "--timeout", "60"] + extra
            env = dict(exec_test.ENV, RECSEARCH_GPU_MODULE=fake, RECSEARCH_FAKE_GPUS=str(ranks))
            if link:
                env["RECSEARCH_FAKE_LINK"] = f"{latency},{bandwidth}"
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
            print(f"calibrate on {ranks} rank(s) {extra}: rc {p.returncode}")
            return p

        cluster, samples = os.path.join(tmp, "c.json"), os.path.join(tmp, "s.json")
        p = run(2, ["-o", cluster, "--samples", samples])
        if not check(p.returncode == 0, f"two ranks: rc {p.returncode}\n{p.stdout}\n{p.stderr}"):
            return 0
        import json
        with open(cluster) as f:
            c = json.load(f)
        with open(samples) as f:
            s = json.load(f)
        dev = c["device"]
        check(close(dev["peak_TFLOPs"], 312) and close(dev["peak_TFLOPs_by_dtype"]["f32"], 19.5)
              and close(dev["peak_TFLOPs_by_dtype"]["tf32"], 156),
              f"GEMM rates are not the fake device's: {dev}")
        check(close(dev["memory_bandwidth_GBps"], 2000) and close(dev["memory_GiB"], 80),
              f"copy bandwidth or memory are not the fake device's: {dev}")
        levels = c["levels"]
        check(len(levels) == 1 and levels[0]["name"] == "gpu" and levels[0]["size"] == 2,
              f"levels: {levels}")
        check(close(levels[0]["bandwidth_GBps"], bandwidth / 1e9, 1e-3) and
              close(levels[0]["latency_us"], latency * 1e6, 1e-3),
              f"the link is not the fake's ({latency * 1e6} us, {bandwidth / 1e9} GB/s): {levels}")
        check(c.get("cost", {}).get("compute_efficiency") == 1.0, f"cost: {c.get('cost')}")
        # Every sample recomputed from the fake's figures: 3 dtypes x 32
        # shapes x 3 passes, 4 kinds x 6 sizes on one level.
        gemms = s["gemms"]
        check(len(gemms) == 3 * 32 * 3, f"{len(gemms)} GEMM samples")
        rate = {"f32": 19.5e12, "tf32": 156e12, "bf16": 312e12}
        bad = [g for g in gemms if not close(g["seconds"], 2 * g["m"] * g["n"] * g["k"] /
                                             rate[g["dtype"]])]
        check(not bad, f"GEMM samples not at the fake's rates: {bad[:3]}")
        colls = s["levels"][0]["collectives"]
        check(len(colls) == 24, f"{len(colls)} collective samples")
        k = 2
        for x in colls:
            share = 2 * (k - 1) / k if x["kind"] == "all-reduce" else k - 1
            check(close(x["bytes"], share * x["elements"] * 4), f"ring bytes of {x}")
        exec_test.TMP = tmp
        g = exec_test.write("chain.json", exec_test.chain_graph(8, 16, 24, 4))
        q = subprocess.run([exe, "search", g, "--cluster", cluster, "-q", "-o",
                            os.path.join(tmp, "p.json")], capture_output=True, text=True)
        check(q.returncode == 0, f"search on the calibrated cluster: {q.stderr}")

        p = run(1, ["-o", cluster])
        check(p.returncode == 2 and "a cluster file needs the collectives of at least 2 ranks"
              in p.stderr, f"one rank with -o: rc {p.returncode}\n{p.stderr}")
        p = run(1, ["--samples", samples])
        check(p.returncode == 0 and "one rank: no collectives measured" in p.stdout,
              f"one rank, samples only: rc {p.returncode}\n{p.stdout}\n{p.stderr}")
        p = run(2, [], link=False)
        check(p.returncode == 4 and "RECSEARCH_FAKE_LINK" in p.stderr,
              f"a failing collective: rc {p.returncode}\n{p.stderr}")
    return 0


CASES = {"unlinked": case_unlinked, "module": case_module, "load": case_load, "archs": case_archs,
         "fake": case_fake, "calibrate": case_calibrate}


def main(argv):
    if len(argv) != 4 or argv[3] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    exe, consumer, module, name = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2], argv[3]
    if CASES[name](exe, consumer, module) == 77:
        return 77
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
