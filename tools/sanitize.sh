#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds recsearch under the sanitizers and runs the tests there:
#   * AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer):
#     the unit, CLI, C API, fuzz-corpus and adversarial tests, in
#     ASAN_BUILD_DIR (build-asan). This is the default.
#   * ThreadSanitizer (SANITIZE=tsan, or SANITIZE="asan tsan"): the tests
#     that run the oneTBB-parallel paths with several threads (operator
#     spaces, the rec search), in TSAN_BUILD_DIR (build-tsan). Not in the
#     default: Debian's libtbb is not built with TSan, so the happens-before
#     edges its scheduler creates (spawning a task, joining it) are invisible
#     and every parallel_for is reported (62 reports in test_algebra_op_space,
#     302 in test_search_properties:
#     operator new/delete, vectors handed to workers, TBB's own range
#     bookkeeping). A suppression broad enough to hide them (any frame in
#     tbb::detail or libtbb.so) would hide every race in our loop bodies as
#     well, so there is none: run it against a TSan-built oneTBB
#     (PKG_CONFIG_PATH) to get a meaningful answer.
# The benchmark and the sample-data check are left out. The last line is
# the summary "sanitizers: N passed, M failed[, K skipped]", which
# tools/test.sh adds to its own. Any sanitizer report fails its test: the
# options below make them fatal.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

asan_dir=${ASAN_BUILD_DIR:-build-asan}
tsan_dir=${TSAN_BUILD_DIR:-build-tsan}
which=${SANITIZE:-asan}
jobs=${SANITIZE_JOBS:-2}

# halt_on_error turns UBSan's recoverable reports into failures.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
# The reduced set: the adversarial chain is 10^5 deep (not 10^6) and the
# truncated file 8 MiB (not 48): the sanitizers slow them down ten-fold.
export RECSEARCH_ADV_DEPTH=${RECSEARCH_ADV_DEPTH:-100000}
export RECSEARCH_ADV_MB=${RECSEARCH_ADV_MB:-8}
# The graph x cluster matrices of the search, eval and sweep tests keep a
# fixed diagonal (tests/support/reduced.hpp); the plain run covers them all.
export RECSEARCH_TEST_REDUCED=1
echo "sanitize.sh: reduced adversarial sizes under the sanitizers: chain depth" \
  "$RECSEARCH_ADV_DEPTH, truncated file $RECSEARCH_ADV_MB MiB" >&2
# Not abort_on_error: doctest's SIGABRT handler allocates, which deadlocks
# inside TSan's report; halt_on_error exits 66 instead.
export TSAN_OPTIONS=halt_on_error=1:abort_on_error=0:second_deadlock_stack=1

# Not -Dwerror=true: the same code already builds warning-free with -Werror
# in tools/setup-build.sh's folder; GCC's instrumented builds add warnings
# of their own (-Wmaybe-uninitialized under ASan, -Wtsan on atomic fences)
# that are not about our code.
setup() {  # dir, meson options...
  local dir=$1
  shift
  set -- -Dwerror=false "$@"
  if [[ -f $dir/meson-private/coredata.dat ]]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null || meson setup --wipe "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

total_pass=0
total_fail=0
total_skip=0

count() {  # testlog.json -> "pass fail skip"
  python3 - "$1" <<'PY'
import json, sys
counts = {"pass": 0, "fail": 0, "skip": 0}
kind = {"OK": "pass", "EXPECTEDFAIL": "pass", "SKIP": "skip",
        "FAIL": "fail", "TIMEOUT": "fail", "UNEXPECTEDPASS": "fail", "ERROR": "fail"}
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if line:
            try:
                result = json.loads(line).get("result", "ERROR")
            except ValueError:
                result = "ERROR"
            counts[kind.get(result, "fail")] += 1
print(counts["pass"], counts["fail"], counts["skip"])
PY
}

# dir, label, ninja targets (empty: all), -- meson test arguments
run_suite() {
  local dir=$1 label=$2
  shift 2
  local targets=()
  while [[ $1 != -- ]]; do
    targets+=("$1")
    shift
  done
  shift
  local start=$SECONDS
  if ! ninja -C "$dir" -j "$jobs" "${targets[@]}"; then
    echo "sanitize.sh: $label build failed; its tests count as one failure" >&2
    total_fail=$((total_fail + 1))
    return
  fi
  local log=$dir/meson-logs/testlog.json rc=0
  rm -f "$log"
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes "$jobs" \
    --timeout-multiplier 4 "$@" || rc=$?
  if [[ ! -f $log ]]; then
    echo "sanitize.sh: $label: meson test wrote no log (exit $rc)" >&2
    total_fail=$((total_fail + 1))
    return
  fi
  local p f s
  read -r p f s <<<"$(count "$log")"
  if ((rc != 0 && f == 0)); then f=1; fi
  echo "sanitize.sh: $label: $p passed, $f failed, $s skipped ($((SECONDS - start)) s)" >&2
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
  total_skip=$((total_skip + s))
}

if [[ " $which " == *" asan "* ]]; then
  # The execution layer's MPI and GPU backends are left out: their tests run
  # under mpirun or need a GPU, which this run skips anyway, and nvcc would
  # only lengthen the build.
  # -O2 with -g1 (line tables and function names, enough for the
  # sanitizers' stack traces) rather than debugoptimized's full -g: a
  # quarter less compile time on this, the run's largest build.
  setup "$asan_dir" -Db_sanitize=address,undefined -Db_lundef=false -Dbenchmarks=false \
    -Doptimization=2 -Ddebug=false -Dcpp_args=-g1 -Dc_args=-g1 \
    -Dmpi=disabled -Dcuda=disabled -Dnccl=disabled
  # Every unit, CLI, fuzz-replay and adversarial test. Left out: tests that
  # load the library into another program (Python ctypes: the binding and
  # its torch.fx front end; an installed or subproject copy: ASan must be
  # that program's first library), drive a
  # browser, or run under mpirun (the execution layer's own runs), and the
  # Python check of the sample data (no code of ours).
  skip='^(capi_python|onnx_torch_fx|capi_install|capi_subproject|report_browser|exec_.*|data_.*)$'
  mapfile -t names < <(meson test -C "$asan_dir" --no-rebuild --list 2>/dev/null |
    sed -n 's/^recsearch:[^ ]* \/ //p' | grep -Ev "$skip")
  if ((${#names[@]} == 0)); then
    echo "sanitize.sh: no tests listed in $asan_dir" >&2
    total_fail=$((total_fail + 1))
  else
    run_suite "$asan_dir" "ASan+UBSan" -- "${names[@]}"
  fi
fi

if [[ " $which " == *" tsan "* ]]; then
  setup "$tsan_dir" -Db_sanitize=thread -Db_lundef=false -Dbenchmarks=false \
    -Dbuildtype=debugoptimized
  # Only what the threaded tests need: the library and two test programs
  # (both compare plans and operator spaces across thread counts).
  run_suite "$tsan_dir" "TSan" tests/test_search_properties tests/test_algebra_op_space -- \
    search_properties algebra_op_space
fi

summary="sanitizers: $total_pass passed, $total_fail failed"
((total_skip > 0)) && summary+=", $total_skip skipped"
echo "$summary"
((total_fail == 0))
