#!/usr/bin/env bash
# Starts a zerod on this machine (state in a fresh temporary directory, a
# random token), submits the demo job as two ranks, follows it with a
# progress bar, prints its status, the end of its log and the result, and
# stops zerod. Run from the repository root after scripts/build.sh; extra
# arguments go to `zeroctl submit` (e.g. --set run.steps=300).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/cmd
state=$(mktemp -d)
trap 'kill "$zerod_pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$state"' EXIT
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export ZEROD_TOKEN
ZEROD_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

"$bin/zerod" --state-dir "$state" --listen 127.0.0.1:0 --slots 2 &
zerod_pid=$!
while [ ! -s "$state/zerod.address" ]; do sleep 0.1; done
export ZEROD_ADDRESS
ZEROD_ADDRESS=$(cat "$state/zerod.address")

status=0
"$bin/zeroctl" submit examples/demo.json --np 2 --name demo --max-restarts 1 --wait "$@" || status=$?
"$bin/zeroctl" status 1
echo "--- last lines of rank 0's log ---"
"$bin/zeroctl" logs 1 --rank 0 | tail -n 8
exit "$status"
