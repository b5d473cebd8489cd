#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages recsearch needs to build and test, and only
# those that are missing (apt-get update runs once, and only then).
# Used by tools/test.sh and tools/quickstart.sh; safe to run on its own.
# (libonnx-dev, libprotobuf-dev: ONNX import; libonnx-testdata: published
# ONNX models the import tests read; chromium: the headless browser that
# checks the HTML plan report; graphviz: checks the DOT report.)
# (cmake: Meson finds doctest through its CMake package; openmpi-bin:
# mpirun, which the execution tests run; clang and
# libclang-rt-14-dev: libFuzzer, for tools/fuzz.sh; coinor-libcbc-dev: the
# MIP solver of the ilp reference search; clang-format: tools/check_format.sh,
# which tools/test.sh runs; clang-tidy: tools/check_tidy.sh; libsimdjson-dev:
# the fast graph reader, simdjson's On-Demand parser; libjemalloc-dev: the
# recsearch tool's allocator.)
# (python3-torch, python3-torchvision, python3-onnx: the ONNX tests export
# real PyTorch models with torch.onnx, and the Python package's torch.fx
# front end is tested on them.)
set -euo pipefail

packages=(meson ninja-build pkg-config cmake g++ libboost-graph-dev libtbb-dev
          nlohmann-json3-dev doctest-dev libcli11-dev libopenmpi-dev openmpi-bin python3
          libonnx-dev libprotobuf-dev libonnx-testdata chromium graphviz
          clang libclang-rt-14-dev coinor-libcbc-dev clang-format clang-tidy libsimdjson-dev
          libjemalloc-dev
          python3-torch python3-torchvision python3-onnx)

if ! command -v dpkg >/dev/null 2>&1; then
  echo "install-deps: no dpkg here; install these yourself: ${packages[*]}" >&2
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$p")
  fi
done
((${#missing[@]} == 0)) && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
