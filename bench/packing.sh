#!/usr/bin/env bash
# Useful target tokens a second, packed against one example a window.
# Generates an instruction set whose examples' lengths are log-normal (a
# median near 250 ids, sigma 0.6, as chat and Alpaca-style sets run; at
# most about 960 ids, so that every example fits T 1024),
# tokenizes it with the Llama 3 fixture tokenizer at each T both ways
# (`zeroctl tokenize --seq-len T` and `--pack`), trains examples/sft.json's
# model on each for STEPS steps, and prints for each: the windows, their
# fill, tokens/s, targets/s (tokens/s times the share of ids that are
# targets) and packed's ratio to padded.
#
#   bench/packing.sh [STEPS] [T ...]      (defaults 20, and T 1024 2048)
#
# ZEROD_BUILD names the build (default build/); PACKING_SET, overrides of
# the job's config (`key=value ...`, each a --set), e.g. the GPU's model
# in scripts/gpu_check.sh bench.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
shift || true
lengths=("${@:-1024 2048}")
read -r -a lengths <<<"${lengths[*]}"
build=${ZEROD_BUILD:-$PWD/build}
tokenize=$build/cmd/zero-tokenize
worker=$build/cmd/zero-worker
sets=()
for kv in ${PACKING_SET:-}; do sets+=(--set "$kv"); done
tok=$PWD/tests/fixtures/tokenizers/llama3_bpe
job=$PWD/examples/sft.json
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# 2000 examples of common words (about 2.7 ids a word in the fixture's
# vocabulary): a prompt of a third of the example, the response the rest;
# words drawn by a fixed seed.
awk -v n=2000 'BEGIN {
  srand(17)
  split("the of and to in is was that for on with as by at from this be are or an it which not have but one", w, " ")
  for (i = 0; i < n; ++i) {
    z = sqrt(-2 * log(1 - rand())) * cos(6.283185307 * rand())
    words = int(exp(log(94) + 0.6 * z)); if (words < 4) words = 4; if (words > 360) words = 360
    p = ""; r = ""
    for (k = 0; k < words; ++k) {
      x = w[1 + int(rand() * length(w))]
      if (k < words / 3) p = p " " x; else r = r " " x
    }
    printf "{\"prompt\": \"%s\\n\", \"response\": \"%s\"}\n", p, r
  }
}' >"$dir/set.jsonl"

for T in "${lengths[@]}"; do
  declare -A rate=()
  for mode in padded packed; do
    flag=()
    [[ $mode == packed ]] && flag=(--pack)
    line=$("$tokenize" --tokenizer "$tok" --output "$dir/$mode.bin" --seq-len "$T" "${flag[@]}" "$dir/set.jsonl")
    share=$(sed -E 's/.* ([0-9]+) ids, ([0-9]+) of them targets.*/\2 \1/' <<<"$line" | awk '{print $1 / $2}')
    windows=$(grep -oE '[0-9]+ windows|[0-9]+ examples in windows' <<<"$line" | head -1 | grep -oE '^[0-9]+')
    done_line=$("$worker" --config "$job" --set data.path="\"$dir/$mode.bin\"" --set data.seq_len="$T" \
      --set model.block_size="$T" --set run.steps="$steps" --set train_batch_size=4 --set steps_per_print="$steps" "${sets[@]}" |
      grep '^done:')
    tps=$(grep -oE '[0-9]+ tok/s' <<<"$done_line" | grep -oE '^[0-9]+')
    rate[$mode]=$(awk -v t="$tps" -v s="$share" 'BEGIN {printf "%.0f", t * s}')
    printf 'T %5d %-6s %5s windows, target share %.3f, %7d tok/s, %7d targets/s (%s)\n' "$T" "$mode" "$windows" \
      "$share" "$tps" "${rate[$mode]}" "$line"
  done
  awk -v a="${rate[packed]}" -v b="${rate[padded]}" -v T="$T" \
    'BEGIN {printf "T %5d packed / padded targets/s: %.2fx\n", T, a / b}'
done
