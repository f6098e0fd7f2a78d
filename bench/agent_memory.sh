#!/usr/bin/env bash
# What a rank costs its host beside its training, under zerod: resident and
# own (private dirty) memory of each rank's zero-agent and of the
# zero-worker it runs, 10 s into the demo job at 2 ranks. The reference is
# the training process, measured in the same run.
#
#   bench/agent_memory.sh [BUILD_DIR]     (from the repository's root)
set -euo pipefail
build=${1:-build}
state=$(mktemp -d)
export ZEROD_TOKEN OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ZEROD_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
"$build/cmd/zerod" --state-dir "$state" --listen 127.0.0.1:0 --slots 2 > "$state/zerod.out" 2>&1 &
zerod=$!
trap 'kill $zerod 2>/dev/null; wait $zerod 2>/dev/null; rm -rf "$state"' EXIT
until [ -s "$state/zerod.address" ]; do sleep 0.1; done
address=$(cat "$state/zerod.address")
"$build/cmd/zeroctl" --address "$address" submit examples/demo.json --np 2 > /dev/null
sleep 10

# MB of a smaps_rollup field, to a tenth.
field() { awk -v f="$2:" '$1 == f {printf "%.1f", $2 / 1024}' "/proc/$1/smaps_rollup"; }
echo "| process | resident MB | own (private dirty) MB |"
echo "| --- | --- | --- |"
for name in zero-agent zero-worker; do
  for pid in $(pgrep -x "$name"); do
    # This job's processes only: their tag names the state directory.
    tr '\0' '\n' < "/proc/$pid/environ" | grep -q "^ZEROD_WORKER_TAG=$state" || continue
    echo "| $name | $(field "$pid" Rss) | $(field "$pid" Private_Dirty) |"
  done
done
"$build/cmd/zeroctl" --address "$address" cancel 1 > /dev/null
