#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up what is missing, builds the recsearch CLI and searches a plan for
# one GPT-2 block on 64 DGX-H100 nodes (512 GPUs). Extra arguments go to
# `recsearch search`, e.g. `tools/quickstart.sh --mode infer`.
# BUILD_DIR (default: build) selects the build folder.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup-build.sh
build_dir=${BUILD_DIR:-build}
ninja -C "$build_dir" tools/recsearch/recsearch

set -x
"$build_dir/tools/recsearch/recsearch" search data/graphs/gpt2_block.json \
  --cluster data/clusters/dgx_h100_64x8.json --format table "$@"
