#!/usr/bin/env bash
# Installs what the build needs, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "$@"
# Root may run the Open MPI tests too.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Serially: every test already uses all cores through OpenMP and OpenBLAS.
ctest --test-dir build --output-on-failure
