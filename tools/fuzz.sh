#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fuzzes recsearch's readers with libFuzzer (clang, AddressSanitizer and
# UndefinedBehaviorSanitizer) and prints, per target, the executions run,
# the time and what was found.
#
#   tools/fuzz.sh [TARGET...]        targets: graph cluster plan eval (default: all)
#
# FUZZ_SECONDS (default 60) is the time per target, or FUZZ_RUNS a number of
# executions per target instead (no time limit); FUZZ_TIMEOUT (default 60)
# the seconds one input may take (the bundled GPT-2 block searches in about
# 10 s under the fuzzer's instrumentation on a loaded machine); FUZZ_BUILD_DIR (default
# build-fuzz) the build folder. Each target starts from its seed corpus
# tests/fuzz/corpus/<target> and grows a working corpus in
# FUZZ_BUILD_DIR/corpus/<target>; crashes, leaks and timeouts are written to
# FUZZ_BUILD_DIR/artifacts/<target>/. A crash found: fix it, then copy the
# input into tests/fuzz/corpus/<target>/ so that every test run replays it.
# The exit status is 1 when any target found something.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dir=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
runs=${FUZZ_RUNS:-}
limit=(-max_total_time="$seconds")
[[ -n $runs ]] && limit=(-runs="$runs")
targets=("$@")
((${#targets[@]} == 0)) && targets=(graph cluster plan eval)

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz.sh: clang++ not found (tools/install-deps.sh installs clang and libFuzzer)" >&2
  exit 2
fi
if [[ ! -f $dir/meson-private/coredata.dat ]]; then
  CXX=clang++ CC=clang meson setup "$dir" -Dfuzzing=true -Db_sanitize=address,undefined \
    -Db_lundef=false -Dcpp_args=-fsanitize=fuzzer-no-link -Dbenchmarks=false \
    -Dbuildtype=debugoptimized
fi
ninja -C "$dir" -j "${FUZZ_JOBS:-2}" "${targets[@]/#/tests/fuzz/fuzz_}"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
found=0
for t in "${targets[@]}"; do
  corpus=$dir/corpus/$t
  artifacts=$dir/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  log=$dir/fuzz-$t.log
  rc=0
  start=$SECONDS
  # The seed files run first (read-only); new inputs go to the working corpus.
  "$dir/tests/fuzz/fuzz_$t" "$corpus" "tests/fuzz/corpus/$t" \
    "${limit[@]}" -timeout="${FUZZ_TIMEOUT:-60}" -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^stat::.*average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  if ((rc != 0)); then
    found=1
    echo "fuzz_$t: FOUND a problem after ${execs:-?} executions (exit $rc); see $log and $artifacts/"
  else
    echo "fuzz_$t: ${execs:-?} executions in $((SECONDS - start)) s (${secs:-?}/s, ${cov:-cov: ?}), nothing found"
  fi
done
exit "$found"
