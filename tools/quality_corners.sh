#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The larger run of the corner quality suite (issue 19; docs/quality.md,
# "Corners"): runs tests/search/quality_corners_test.cpp's case generator on
# its full set (RECSEARCH_QUALITY=full: 18 graphs, 2 clusters each, no budget
# and budgets at 0.9/0.7/0.5 of the optimum's memory) and prints one line per
# budget, then the distribution of rec's gap to the proven optimum: mean,
# 95th percentile, worst, and the worst cases' names. The test's own
# properties (rec fits whenever the optimum does, monotone in the budget)
# are checked on the way; a failure exits non-zero.
#
#   tools/quality_corners.sh [BUILD_DIR]     # default: build
#
# About 120 s of CPU on the 2-core development machine (ilp, the
# exhaustive search and rec's kicks take nearly all of it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
ninja -C "$build" tests/test_search_quality_corners >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
RECSEARCH_QUALITY=full RECSEARCH_QUALITY_LOG=1 "$build/tests/test_search_quality_corners" \
  -tc='corners*' -s >"$log" 2>&1 || rc=$?
grep '^case ' "$log" || true
# doctest's MESSAGE lines (printed on success with -s) carry the distribution.
sed -n 's/^.*MESSAGE: //p' "$log" | grep -E '^(corners:|rec/optimum|  worst)' || true
grep -E 'ERROR|FATAL' "$log" || true
exit "$rc"
