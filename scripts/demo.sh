#!/usr/bin/env bash
# Installs what the build needs, builds, and trains the demo job: a small GPT
# learning two-digit addition from the built-in synthetic data on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/cmd/zero-worker --config examples/demo.json "$@"
