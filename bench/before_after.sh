#!/usr/bin/env bash
# Training throughput of this tree against an earlier revision, the two
# builds alternated in one run so that the machine's drift falls on both:
#
#   bench/before_after.sh REV [ROUNDS]
#
# Builds REV's train_throughput and zero_throughput in a git worktree
# (/tmp/zerod-before-REV), then ROUNDS times (default 3) runs
# `train_throughput 3` and `zero_throughput gpt2 3` (one rank) from REV and
# from build/, in turn. Prints the median tokens/s of every row of each
# benchmark's table, before and after, and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/before_after.sh REV [ROUNDS]}
rounds=${2:-3}
before=/tmp/zerod-before-$rev
if [ ! -d "$before" ]; then
  git worktree add --detach "$before" "$rev" >/dev/null
fi
cmake -S "$before" -B "$before/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$before/build" --target train_throughput zero_throughput >/dev/null
cmake --build build --target train_throughput zero_throughput >/dev/null

out=$(mktemp -d)
for ((r = 0; r < rounds; ++r)); do
  for side in before after; do
    dir=build
    [ "$side" = before ] && dir=$before/build
    # Rows: "model batch seq params MFLOP/token tok/s ..." (train) and
    # "stage overlap tokens/s ..." (zero); the key is what comes before tokens/s.
    "$dir/bench/train_throughput" 3 | awk -v s="$side" '$1 ~ /^gpt2/ {
      print "train_throughput " $1 " " $2 "x" $3 "\t" s "\t" $6 }' >>"$out/rows"
    "$dir/bench/zero_throughput" gpt2 3 | awk -v s="$side" '$1 ~ /^[0-9]+$/ {
      print "zero_throughput stage " $1 " overlap " $2 "\t" s "\t" $3 }' >>"$out/rows"
  done
done

echo "| benchmark row | before tokens/s (median of $rounds) | after tokens/s | after / before |"
echo "| --- | --- | --- | --- |"
sort -t$'\t' -k1,1 -k2,2 "$out/rows" | awk -F'\t' '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { v[$1, $2] = v[$1, $2] " " $3; keys[$1] = 1 }
  END {
    for (k in keys) {
      b = median(v[k, "before"]); a = median(v[k, "after"])
      printf "| %s | %.1f | %.1f | %.3f |\n", k, b, a, a / b
    }
  }' | sort
rm -rf "$out"
