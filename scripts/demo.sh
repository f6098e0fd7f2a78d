#!/usr/bin/env bash
# Installs what the build needs, builds, and trains the demo job: a small GPT
# learning two-digit addition from the built-in synthetic data, as several
# CPU ranks under mpirun with ZeRO stage 2 (ZEROD_DEMO_RANKS, default 2; each
# takes its share of the cores). Extra arguments go to zero-worker (--set
# key=value ...). Only what the demo runs is built, a CPU-only zero-worker
# in build-demo/, so a fresh machine trains in minutes; scripts/build.sh
# builds every program into build/, scripts/test.sh the tests too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build
cmake -S . -B build-demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROD_WITH_CUDA=OFF -DZEROD_WITH_GRPC=OFF \
  -DZEROD_BUILD_TESTS=OFF -DZEROD_BUILD_BENCH=OFF
cmake --build build-demo --parallel "$(nproc)" --target zero-worker
ranks="${ZEROD_DEMO_RANKS:-2}"
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun -np "$ranks" --oversubscribe build-demo/cmd/zero-worker --config examples/demo.json "$@"
