#!/usr/bin/env bash
# Installs what the build needs, builds, and trains the demo job: a small GPT
# learning two-digit addition from the built-in synthetic data, as several
# CPU ranks under mpirun with ZeRO stage 2 (ZEROD_DEMO_RANKS, default 2; each
# takes its share of the cores). Extra arguments go to zero-worker (--set
# key=value ...). Only the build's packages and zero-worker are built, so a
# fresh machine trains in minutes; scripts/test.sh builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build
ZEROD_BUILD_TARGETS=zero-worker scripts/build.sh
ranks="${ZEROD_DEMO_RANKS:-2}"
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec mpirun -np "$ranks" --oversubscribe build/cmd/zero-worker --config examples/demo.json "$@"
