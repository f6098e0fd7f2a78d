#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/) with clang, ASan and UBSan into
# build-fuzz/ and runs each for SECONDS (default 60) from its seeds, keeping
# what it learns in build-fuzz/corpus/<target>/. A crash, leak, hang or
# excess of memory fails the script and leaves the input in
# build-fuzz/crashes/<target>/: once fixed, it goes into fuzz/corpus/<target>/
# so that ctest replays it. Prints one line per target: executions, edges
# covered (cov) and features (ft).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
scripts/setup.sh >/dev/null
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZEROD_FUZZ=ON \
  -DZEROD_WITH_CUDA=OFF -DZEROD_WITH_MPI=OFF -DZEROD_BUILD_TESTS=OFF -DZEROD_BUILD_BENCH=OFF -DZEROD_NATIVE=OFF \
  >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in fuzz/fuzz_*.cc; do targets+=("$(basename "$src" .cc)"); done
fi
cmake --build build-fuzz --parallel "$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t"
  log="build-fuzz/$t.log"
  if ! build-fuzz/fuzz/"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/crashes/$t/" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    echo "fuzz: $t FAILED; its log is $log, the input in build-fuzz/crashes/$t/"
    grep -m 20 -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$log" || true
    failed=1
    continue
  fi
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*$')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*$')
  echo "fuzz: $t ${seconds} s, ${execs} executions, cov ${cov}, ft ${ft}, corpus $(ls "build-fuzz/corpus/$t" | wc -l) inputs"
done
exit $failed
