#!/usr/bin/env bash
# Ranks and other programs sharing a node's cores, as people run zerod:
#
#   bench/cpu_sharing.sh [ROUNDS]
#
# 1. `mpirun -np <cores>` of a small job with no thread setting, against the
#    same with `-x OMP_NUM_THREADS=1` (the worker shares the cores among the
#    ranks itself; goal: within 10%).
# 2. One worker alone, against the same beside one busy loop per core (goal:
#    at most 2.5x slower), and the same two with OpenMP's old waits (every
#    core's thread, spinning 300000 iterations: what the worker did before).
# Each figure is the median wall time of ROUNDS runs (default 3), the rows
# of each comparison alternated so the machine's drift falls on both.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
cores=$(nproc)
worker=build/cmd/zero-worker
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
job=$(mktemp --suffix=.json)
cat >"$job" <<'EOF'
{"model": {"preset": "custom", "n_layer": 2, "n_head": 4, "n_embd": 128, "vocab_size": 256, "block_size": 64},
 "data": {"kind": "synthetic", "seq_len": 64},
 "run": {"steps": 30, "device": "cpu", "sample": {"tokens": 0}},
 "train_batch_size": 16, "steps_per_print": 1000,
 "zero_optimization": {"stage": 2}}
EOF

seconds() {  # wall seconds of a command
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
busy_loops() { for ((c = 0; c < cores; ++c)); do (while :; do :; done) & done; }

rows=$(mktemp -d)
for ((r = 0; r < rounds; ++r)); do
  seconds mpirun -np "$cores" --oversubscribe "$worker" --config "$job" >>"$rows/mpi_plain"
  seconds mpirun -np "$cores" --oversubscribe -x OMP_NUM_THREADS=1 "$worker" --config "$job" >>"$rows/mpi_one"
  seconds "$worker" --config "$job" >>"$rows/idle"
  seconds env GOMP_SPINCOUNT=300000 OMP_NUM_THREADS="$cores" "$worker" --config "$job" >>"$rows/idle_old"
  busy_loops
  seconds "$worker" --config "$job" >>"$rows/busy"
  seconds env GOMP_SPINCOUNT=300000 OMP_NUM_THREADS="$cores" "$worker" --config "$job" >>"$rows/busy_old"
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
done

m() { median <"$rows/$1"; }
ratio() { awk -v a="$(m "$1")" -v b="$(m "$2")" 'BEGIN { print a / b }'; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "| comparison | seconds | against | seconds | ratio |"
echo "| --- | --- | --- | --- | --- |"
printf "| mpirun -np %d, no thread setting | %.2f | with -x OMP_NUM_THREADS=1 | %.2f | %.2f |\n" \
  "$cores" "$(m mpi_plain)" "$(m mpi_one)" "$(ratio mpi_plain mpi_one)"
printf "| one worker beside %d busy loops | %.2f | alone | %.2f | %.2f |\n" \
  "$cores" "$(m busy)" "$(m idle)" "$(ratio busy idle)"
printf "| the same with the old waits, beside the loops | %.2f | alone | %.2f | %.2f |\n" \
  "$(m busy_old)" "$(m idle_old)" "$(ratio busy_old idle_old)"
rm -rf "$rows" "$job"
