#!/usr/bin/env bash
# kill -9 of a run at random moments, each run then resumed (run.resume
# "latest") to its end: every final checkpoint must be the uninterrupted
# run's, file for file, byte for byte. A checkpoint is saved every step.
# Each kill lands at a uniformly random moment between the end of the
# uninterrupted run's first step and its end (its own times).
#   bench/gpu/crash_resume.sh WORKER OUT NAME KILLS [zero-worker arguments...]
# Prints a line a kill (when it landed, the step resumed from, the resumed
# run's time to its first step, whether the final checkpoint is the same)
# and a last line "NAME: K/KILLS final checkpoints the uninterrupted
# run's"; exit 0 when all are.
set -uo pipefail
worker=$1 out=$2 name=$3 kills=$4
shift 4
args=("$@")
mkdir -p "$out"

# One run of the job into checkpoint root $1, its JSON log in $2; in the
# background with $3 = bg (the worker's own pid in $!, to be killed).
start_run() {
  local sets=(--set "run.checkpoint={\"dir\":\"$1\",\"interval\":1,\"keep\":1}" --set 'run.resume="latest"'
    --log-format json)
  if [ "${3:-}" = bg ]; then
    "$worker" "${args[@]}" "${sets[@]}" >"$2" 2>&1 &
  else
    "$worker" "${args[@]}" "${sets[@]}" >"$2" 2>&1
  fi
}
# A field of a JSON log's last event of kind $2 ("" where none).
field() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
value = ""
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("{"):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("event") == sys.argv[2] and sys.argv[3] in j:
            value = j[sys.argv[3]]
print(value)
PY
}
final_checkpoint() { echo "$1/$(cat "$1/latest" 2>/dev/null)"; }

ref=$out/$name-ref
rm -rf "$ref"
t0=$(date +%s.%N)
start_run "$ref" "$out/$name-ref.log" || { echo "$name: the uninterrupted run failed, see $out/$name-ref.log"; exit 1; }
total=$(python3 -c "print($(date +%s.%N) - $t0)")
first=$(field "$out/$name-ref.log" summary time_to_first_step_s)
echo "$name: uninterrupted in $(printf %.1f "$total") s, first step done $(printf %.2f "$first") s after start"

same=0
for i in $(seq 1 "$kills"); do
  dir=$out/$name-kill$i
  rm -rf "$dir"
  at=$(python3 -c "import random; print(f'{random.uniform($first, $total):.2f}')")
  start_run "$dir" "$out/$name-kill$i.log" bg
  pid=$!
  sleep "$at"
  if kill -9 "$pid" 2>/dev/null; then landed="killed at $at s"; else landed="ended before $at s"; fi
  wait "$pid" 2>/dev/null
  start_run "$dir" "$out/$name-resume$i.log"
  code=$?
  from=$(field "$out/$name-resume$i.log" resume step)
  resumed_first=$(field "$out/$name-resume$i.log" summary time_to_first_step_s)
  if [ "$code" = 0 ] && diff -rq "$(final_checkpoint "$ref")" "$(final_checkpoint "$dir")" >/dev/null 2>&1; then
    verdict=same
    same=$((same + 1))
  else
    verdict="DIFFERS (resume exit $code)"
  fi
  echo "$name kill $i: $landed; resumed from step ${from:-0}, first step $(printf %.2f "${resumed_first:-0}") s after start; final checkpoint $verdict"
done
echo "$name: $same/$kills final checkpoints the uninterrupted run's"
[ "$same" = "$kills" ]
