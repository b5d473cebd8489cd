#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The skip-or-fail decision of the NCCL test (exec_test.case_nccl), without
mpirun or a GPU: the messages `recsearch exec --backend nccl` ends with on a
machine without a build, a driver or a GPU, on a node whose GPUs are fewer
than its ranks, and the runs that must be judged, mapped to skip (77), run
or fail.

Usage: nccl_outcome_test.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exec_test  # noqa: E402

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)


def main():
    status = exec_test.nccl_status
    no_build = "recsearch exec: [rank 0] this build has no NCCL/CUDA backend [E101]\n"
    no_driver = ("recsearch exec: [rank 0] no usable GPU: CUDA driver version is insufficient for "
                 "CUDA runtime version [E401]\n")
    no_device = "recsearch exec: [rank 1] no usable GPU: no CUDA device [E401]\n"
    no_module = "recsearch exec: [rank 0] no usable GPU: cannot load the GPU module [E401]\n"
    shared = ("recsearch exec: [rank 0] no usable GPU: 2 ranks share 1 device(s) on this node "
              "(NCCL needs a device of its own for each rank ...) [E401]\n")
    other_rank = ("recsearch exec: [rank 1] no usable GPU: rank 0 has no device of its own "
                  "(see its message) [E401]\n")
    duplicate = "recsearch exec: [rank 1] ncclCommInitRank failed: invalid usage [E401]\n"
    check(status(2, no_build) == "no-build", "no NCCL in the build")
    for err in (no_driver, no_device, no_module, other_rank):
        check(status(4, err) == "no-gpu", f"no GPU: {err!r}")
    check(status(4, shared + other_rank) == "shared", "the sharing refusal")
    check(status(4, duplicate) == "ran", "an NCCL failure is judged, not skipped")
    check(status(0, "") == "ran", "a run")
    check(status(1, "no usable GPU") == "ran", "exit 1 is not the GPU refusal")
    check(status(None, "TIMEOUT") == "ran", "a hang is judged (and fails)")

    outcome = exec_test.nccl_outcome
    check(outcome("no-build", "no-build")[0] == "skip", "no build: skip")
    check(outcome("no-gpu", "no-gpu")[0] == "skip", "no GPU or driver: skip")
    verdict, why = outcome("ran", "shared")
    check(verdict == "run" and "share" in why, "one GPU: one rank runs, two ranks skip")
    check(outcome("ran", "ran") == ("run", ""), "two GPUs: both run")
    check(outcome("ran", "no-gpu")[0] == "fail", "a GPU for one rank but not for two")
    check(outcome("no-gpu", "ran")[0] == "fail", "no GPU for one rank but two ran")
    check(outcome("no-gpu", "shared")[0] == "fail", "no GPU for one rank, shared for two")
    check(outcome("no-build", "no-gpu")[0] == "fail", "the two runs disagree on the build")
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
