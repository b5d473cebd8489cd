#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing (tools/install-deps.sh) and configures the Meson
# build folder: BUILD_DIR, default build/. Reconfigures an existing folder,
# and wipes it when that fails (e.g. after a Meson upgrade).
# Used by tools/test.sh and tools/quickstart.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/install-deps.sh

# Warnings are errors here (the CI path: tools/test.sh runs this script);
# WERROR=false configures without, e.g. to try a newer compiler.
build_dir=${BUILD_DIR:-build}
opts=(-Dwerror="${WERROR:-true}")
if [[ -f $build_dir/meson-private/coredata.dat ]]; then
  meson setup --reconfigure "$build_dir" "${opts[@]}" || meson setup --wipe "$build_dir" "${opts[@]}"
else
  meson setup "$build_dir" "${opts[@]}"
fi
