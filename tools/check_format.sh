#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that every tracked C and C++ source is formatted as .clang-format
# says (clang-format --dry-run --Werror), without changing any file. Lists
# the files that differ and exits 1 when there is one; exits 2 when
# clang-format is missing. CLANG_FORMAT picks the binary (default
# clang-format). To fix a file: clang-format -i FILE.
# tools/test.sh runs it after the build and counts a difference as a failed
# test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format.sh: $clang_format not found (Debian: apt-get install clang-format)" >&2
  exit 2
fi

# Subprojects are third-party code with their own style.
mapfile -t files < <(git ls-files -- '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh' ':!subprojects/')

# One clang-format run over all files; each difference is reported as
# "FILE:LINE:COL: error: code should be clang-formatted", so the files that
# differ are the distinct FILEs of those lines.
rc=0
report=$("$clang_format" --style=file --dry-run --Werror "${files[@]}" 2>&1 >/dev/null) || rc=$?
mapfile -t differ < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
  <<<"$report" | sort -u)
if ((rc != 0 && ${#differ[@]} == 0)); then
  echo "check_format.sh: $clang_format failed (exit $rc):" >&2
  echo "$report" >&2
  exit 2
fi

if ((${#differ[@]} > 0)); then
  echo "check_format.sh: ${#differ[@]} of ${#files[@]} files are not formatted as .clang-format" \
    "says (fix with: $clang_format -i FILE):" >&2
  printf '  %s\n' "${differ[@]}" >&2
  exit 1
fi
echo "check_format.sh: all ${#files[@]} files formatted"
