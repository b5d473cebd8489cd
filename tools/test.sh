#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up what is missing, builds recsearch and runs the whole test suite.
# The last line is the summary: "tests: N passed, M failed[, K skipped]".
# BUILD_DIR (default: build) selects the build folder.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup-build.sh
build_dir=${BUILD_DIR:-build}

if ! ninja -C "$build_dir"; then
  echo "test.sh: the build failed (errors above); no tests were run" >&2
  exit 1
fi

log=$build_dir/meson-logs/testlog.json
rm -f "$log"
test_rc=0
meson test -C "$build_dir" --print-errorlogs --num-processes 2 || test_rc=$?

if [[ ! -f $log ]]; then
  if ((test_rc != 0)); then
    echo "test.sh: meson test failed (exit $test_rc) without writing $log" >&2
    echo "tests: 0 passed, 1 failed"
    exit 1
  fi
  echo "tests: 0 passed, 0 failed"
  exit 0
fi

# One JSON object per line, each with a "result".
counts=$(python3 - "$log" <<'PY'
import json, sys
counts = {"pass": 0, "fail": 0, "skip": 0}
kind = {"OK": "pass", "EXPECTEDFAIL": "pass", "SKIP": "skip",
        "FAIL": "fail", "TIMEOUT": "fail", "UNEXPECTEDPASS": "fail", "ERROR": "fail"}
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        try:
            result = json.loads(line).get("result", "ERROR")
        except ValueError:
            result = "ERROR"
        counts[kind.get(result, "fail")] += 1
print(counts["pass"], counts["fail"], counts["skip"])
PY
)
read -r passed failed skipped <<<"$counts"

# meson test failing with no failed test recorded is still a failure.
if ((test_rc != 0 && failed == 0)); then
  echo "test.sh: meson test exited with $test_rc" >&2
  failed=1
fi

# The style check (tools/check_format.sh) counts as one more test: a file
# that clang-format would change fails it.
format_rc=0
tools/check_format.sh || format_rc=$?
if ((format_rc == 0)); then
  passed=$((passed + 1))
else
  echo "test.sh: FAILED: tools/check_format.sh (exit $format_rc): sources differ from" \
    ".clang-format (files listed above; fix with clang-format -i FILE)" >&2
  failed=$((failed + 1))
fi

# The same tests under ASan+UBSan (tools/sanitize.sh), counted in the
# summary; SANITIZE=none skips them, SANITIZE="asan tsan" adds TSan.
if [[ ${SANITIZE:-} != none ]]; then
  san_log=$build_dir/sanitize.log
  tools/sanitize.sh 2>&1 | tee "$san_log" || true
  san=$(tail -n 1 "$san_log")
  if [[ $san =~ ^sanitizers:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed(,\ ([0-9]+)\ skipped)?$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
    skipped=$((skipped + ${BASH_REMATCH[4]:-0}))
  else
    echo "test.sh: tools/sanitize.sh gave no summary (see $san_log)" >&2
    failed=$((failed + 1))
  fi
fi

summary="tests: $passed passed, $failed failed"
((skipped > 0)) && summary+=", $skipped skipped"
echo "$summary"
((failed == 0))
