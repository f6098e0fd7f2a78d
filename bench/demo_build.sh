#!/usr/bin/env bash
# The demo's first step on this machine: scripts/demo.sh's configure and
# build of a CPU-only zero-worker into a fresh directory, then its run to
# the first progress line, timed from the start; as unity batches (the
# default) and file by file (-DCMAKE_UNITY_BUILD=OFF), in turn, ROUNDS
# times. Prints wall and CPU seconds of the build and the seconds to the
# first step for each, and the ratio file by file / unity. Needs the
# packages scripts/setup.sh --build installs.
#   bench/demo_build.sh [ROUNDS]   (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-1}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Seconds from the start to the first progress line; the build's wall and
# CPU seconds in $work/time.
first_step() {
  local unity=$1 dir="$work/build-$1" start
  rm -rf "$dir"
  start=$(date +%s.%N)
  /usr/bin/time -f "%e %U %S" -o "$work/time" bash -c "
    cmake -S . -B '$dir' -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEROD_WITH_CUDA=OFF -DZEROD_WITH_GRPC=OFF \
      -DZEROD_BUILD_TESTS=OFF -DZEROD_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=$unity >/dev/null &&
    cmake --build '$dir' --parallel $(nproc) --target zero-worker >/dev/null"
  mpirun -np 2 --oversubscribe "$dir/cmd/zero-worker" --config examples/demo.json --set run.steps=100 2>&1 |
    grep -m1 '^step' >/dev/null || true
  echo "$(date +%s.%N) - $start" | bc
}

printf "%-6s %-12s %10s %10s %12s\n" round build "wall s" "CPU s" "first step s"
for r in $(seq 1 "$rounds"); do
  for unity in ON OFF; do
    step=$(first_step "$unity")
    read -r wall user sys <"$work/time"
    name=$([ "$unity" = ON ] && echo unity || echo "file by file")
    printf "%-6s %-12s %10.1f %10.1f %12.1f\n" "$r" "$name" "$wall" "$(echo "$user + $sys" | bc)" "$step"
    eval "step_$unity=$step"
  done
  echo "round $r: first step file by file / unity = $(echo "scale=2; $step_OFF / $step_ON" | bc)"
done
