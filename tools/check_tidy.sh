#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs clang-tidy (the checks in .clang-tidy) over the library's sources,
# src/**/*.cpp, with the compile commands of a configured build folder
# (BUILD_DIR, default build; tools/setup-build.sh makes one). Extra
# arguments are passed to run-clang-tidy (e.g. a regex of files: src/search).
# Exits non-zero when clang-tidy reports a warning. Slow (minutes per core):
# not part of tools/test.sh. JOBS sets the parallel runs (default: nproc).
# CLANG_TIDY picks the binary (default clang-tidy).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build}
clang_tidy=${CLANG_TIDY:-clang-tidy}
runner=${RUN_CLANG_TIDY:-run-clang-tidy}
if [[ ! -f $build_dir/compile_commands.json ]]; then
  echo "check_tidy.sh: no $build_dir/compile_commands.json (run tools/setup-build.sh)" >&2
  exit 2
fi
for tool in "$clang_tidy" "$runner"; do
  if ! command -v "$tool" >/dev/null; then
    echo "check_tidy.sh: $tool not found (Debian: apt-get install clang-tidy)" >&2
    exit 2
  fi
done

# The files: the library's own sources (not the CUDA kernels: clang-tidy
# cannot read nvcc's flags). run-clang-tidy matches its arguments as regexes
# against the compile database's paths.
filter=("$@")
((${#filter[@]} == 0)) && filter=("$PWD/src/.*\\.cpp\$")

# -quiet drops the per-file banner; warnings go to stdout, counted below.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
"$runner" -clang-tidy-binary "$(command -v "$clang_tidy")" -p "$build_dir" -quiet \
  -j "${JOBS:-$(nproc)}" "${filter[@]}" 2>/dev/null | tee "$log" || rc=$?
# run-clang-tidy asks for colours: strip them before counting.
warnings=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -c ': warning: ' || true)
echo "check_tidy.sh: $warnings warnings"
((rc == 0 && warnings == 0))
