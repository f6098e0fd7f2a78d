#!/usr/bin/env bash
# Configures and builds zerod (Release, Ninja, all cores) into build/.
# Extra arguments go to cmake, e.g. scripts/build.sh -DZEROD_WITH_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build --parallel "$(nproc)"
