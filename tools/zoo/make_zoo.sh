#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Generates the model zoo: every model listed in data/graphs/zoo/zoo.json is
# written by `recsearch gen` to data/graphs/zoo/NAME.json (graphs up to 5 MB
# are committed; larger ones are made here on demand).
#
#   tools/zoo/make_zoo.sh [RECSEARCH] [NAME...]
#
# RECSEARCH defaults to $RECSEARCH, else the first build*/tools/recsearch/recsearch.
# Names restrict the run to those models.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
exe=${1:-${RECSEARCH:-}}
if [[ $# -gt 0 ]]; then shift; fi
if [[ -z $exe ]]; then
  for c in "$root"/build*/tools/recsearch/recsearch; do
    if [[ -x $c ]]; then exe=$c; break; fi
  done
fi
if [[ -z $exe || ! -x $exe ]]; then
  echo "make_zoo: no recsearch executable; build it or pass its path" >&2
  exit 2
fi
python3 - "$exe" "$root/data/graphs/zoo" "$@" <<'PY'
import json, os, subprocess, sys
exe, zoo, only = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(os.path.join(zoo, "zoo.json")) as f:
    manifest = json.load(f)
for m in manifest["models"]:
    if only and m["name"] not in only:
        continue
    out = os.path.join(zoo, m["name"] + ".json")
    subprocess.run([exe, "gen"] + m["gen"] + ["-o", out], check=True)
    print("%-28s %8.2f MB  (%s devices)" % (m["name"], os.path.getsize(out) / 1e6, m["devices"]))
PY
