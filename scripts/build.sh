#!/usr/bin/env bash
# Configures and builds zerod (Release, Ninja, all cores) into build/.
# Extra arguments go to cmake, e.g. scripts/build.sh -DZEROD_WITH_CUDA=OFF;
# ZEROD_BUILD_TARGETS="zero-worker zeroctl" builds only those (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${ZEROD_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build --parallel "$(nproc)" "${targets[@]}"
