#!/usr/bin/env bash
# The one command run on a GPU machine (see ../shared/GPU.md): builds zerod
# from the tree and the Debian packages that scripts/gpu_deps.sh put in
# .gpu-deps/ (unpacked into a private prefix, never into /), runs every test
# of the CUDA-only build (no MPI, no gRPC) on the GPU, and writes the
# machine, the build log and the test log to $OUT (or gpu-results/).
#   Here:            scripts/gpu_deps.sh
#   On the GPU:      scripts/gpu_check.sh      (carry .gpu-deps)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root/gpu-results}
deps=/tmp/zerod-deps
build=/tmp/zerod-build-gpu
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
say() { echo "gpu_check: $*" | tee -a "$summary"; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nvcc --version | tail -2
  c++ --version | head -1
  cmake --version | head -1
  nproc
} >"$out/machine.txt" 2>&1
say "machine: $(head -1 "$out/machine.txt")"

ls .gpu-deps/*.deb >/dev/null 2>&1 || { say "no .gpu-deps/*.deb: run scripts/gpu_deps.sh here and carry .gpu-deps"; exit 1; }
rm -rf "$deps"
for f in .gpu-deps/*.deb; do dpkg -x "$f" "$deps"; done
lib=$deps/usr/lib/x86_64-linux-gnu
export PATH=$deps/usr/bin:$PATH
export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_SYSROOT_DIR=$deps
export PKG_CONFIG_LIBDIR=$lib/openblas-openmp/pkgconfig:$lib/pkgconfig:$deps/usr/share/pkgconfig

# NCCL comes with PyTorch's Python (the nvidia-nccl wheel); its header, where
# the wheel has none, from the toolkit that gpu_deps.sh found.
nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
nccl_lib=$(ls "$nccl"/lib/libnccl.so* 2>/dev/null | head -1)
nccl_inc=$nccl/include
[ -f "$nccl_inc/nccl.h" ] || nccl_inc=$root/.gpu-deps/include
say "NCCL: ${nccl_lib:-none}, header in $nccl_inc"
export LD_LIBRARY_PATH=$(dirname "${nccl_lib:-/x}"):$LD_LIBRARY_PATH

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DZEROD_WITH_CUDA=ON -DZEROD_WITH_MPI=OFF -DZEROD_WITH_GRPC=OFF -DZEROD_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_inc" -DNCCL_LIBRARY="$nccl_lib" >"$out/configure.log" 2>&1 ||
  { say "configure failed"; tail -30 "$out/configure.log"; exit 1; }
grep -E "NCCL communicator" "$out/configure.log" | sed 's/^-- /gpu_check: /' | tee -a "$summary"
start=$SECONDS
cmake --build "$build" --parallel "$(nproc)" >"$out/build.log" 2>&1 ||
  { say "build failed"; grep -E "error|Error" "$out/build.log" | head -30; exit 1; }
say "built in $((SECONDS - start)) s"

# Several tests at once, each with two OpenMP threads, on the 16 cores.
start=$SECONDS
OMP_NUM_THREADS=2 ctest --test-dir "$build" --parallel 8 --output-on-failure >"$out/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed" "$out/ctest.log" | sed 's/^/gpu_check: /' | tee -a "$summary"
grep -E "\*\*\*|Failed  |Not Run" "$out/ctest.log" | head -20 | tee -a "$summary"
# What was skipped, and why (only GPU tests may skip, and here none should).
grep -h -A1 "SKIPPED \]\|Skipped" "$out/ctest.log" | head -20 | tee -a "$summary"
say "tests took $((SECONDS - start)) s, exit $rc"
exit $rc
