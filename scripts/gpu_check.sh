#!/usr/bin/env bash
# The one command run on a GPU machine (see ../shared/GPU.md): builds zerod
# from the tree and the Debian packages that scripts/gpu_deps.sh put in
# .gpu-deps/ (unpacked into a private prefix, never into /), then runs one
# section in what is left of 9 minutes, writing summary-SECTION.txt (the
# results) and logs-SECTION.tgz (every log, the machine's description among
# them) to $OUT (or gpu-results/), so that several sections run in one call
# come back together:
#   all (default): every test of the CUDA-only build (no MPI, no gRPC) on the
#     GPU, the kernel tests again under compute-sanitizer (memcheck,
#     racecheck), where gpt2's step time goes (wall_clock_breakdown),
#     zerod's LoRA adapter read by PEFT (scripts/peft_check.py), gpt2-xl
#     QLoRA under a 12 GiB cap (trains) and gpt2-xl under that cap without
#     offload (refused before step 1);
#   kernels: the quick check after a change to the kernel table: only the
#     CUDA tests' programs and zero-worker built, the CUDA tests run,
#     test_cuda_kernels under compute-sanitizer memcheck, and where the step
#     of gpt2 at B 16 and gpt2-xl at B 8 goes (wall_clock_breakdown, tokens/s
#     and launches a step);
#   breakdown: where the Llama family's step goes, by op, for Llama-3.2-1B's
#     and Qwen2.5-1.5B's shapes at B 8, T 2048 and Llama-3.2-1B's at B 1,
#     T 8192 (wall_clock_breakdown: each op's time, bytes and GB/s,
#     launches, the compute stream's and the host's waits), then each
#     kernel of one step of the same shapes with one layer, timed by
#     Nsight Compute;
#   bench [SHAPES]: attention alone against PyTorch's SDPA
#     (bench/attention_throughput, bench/gpu/torch_sdpa.py: gpt2's and
#     gpt2-xl's shapes at T 1024, gpt2's at 4096, Llama-3.2-1B's 32 query
#     heads over 8 at T 2048, 4096 and 8192; each packed too, documents of
#     a median 250 tokens, against itself unpacked), packed instruction data
#     against padded (bench/packing.sh: Llama-3.2-1B's shape, T 1024 and
#     2048, useful targets a second), then zerod against
#     PyTorch on gpt2 and gpt2-xl at T 1024 (bench/gpu/train_vs_torch.sh), or
#     on the SHAPES named (gpt2, gpt2-xl, gpt2-4k: gpt2 at T 4096,
#     llama-1b: Llama-3.2-1B's shape at B 8, T 2048, llama-1b-8k: at B 1,
#     T 8192, qwen-1.5b: Qwen2.5-1.5B's at B 8, T 2048; the Llama family's
#     against transformers' own classes, ../shared/anchors/llama_anchor.py),
#     comma-separated;
#   offload: the offload tests on the GPU (tests/test_cuda_offload.cc),
#     gpt2-xl with its optimizer on the host under 12 and 8 GiB caps, and
#     with its parameters too under 4 GiB, against the same job uncapped
#     without offload, 32K tokens a step, each micro-batch's gradients
#     rounded to bf16 (the losses must be equal; tokens/s each, and where
#     the capped step's time goes); then layer by layer
#     (zero_optimization.accumulation "layer", block inputs on the host)
#     under 8 GiB and, parameters offloaded, 4 GiB, against the uncapped
#     layer-major run (losses equal; tokens/s against the uncapped
#     micro-batch run's: the issue's 0.85 and 0.6),
#     the offload path's copy rates against plain cudaMemcpyAsync
#     (bench/copy_bandwidth, which also times pinning 4 GiB as a run pins
#     it, in one buffer and in 8, beside the 12 GiB run's "ready" line and
#     the wait its first step had for registrations: where its start
#     went), and the host's memory bandwidth, AdamW and
#     micro-batch sums (bench/optim_throughput, host_sums_throughput);
#   largest: the largest examples, 12.8B with its states on the host
#     (examples/gpt-12b-offload.json) and 4.2B with everything offloaded
#     (examples/gpt-4b-offload.json), the offload engine's file I/O against
#     fio on the machine's disk (bench/offload_throughput; fio built from
#     the source in .gpu-deps where the machine has none);
#   deepspeed: DeepSpeed ZeRO-Offload (../shared/anchors/ds_offload_anchor.py,
#     carried in .gpu-deps with DeepSpeed's sdist and wheels) on gpt2-xl at
#     32K tokens a step, ZeRO-2 (optimizer on the host) and ZeRO-3
#     (parameters too), each followed by zerod's example at the same stage
#     and tokens a step under a cap of DeepSpeed's GPU peak: tokens/s and
#     the ratio (goal 2);
#   qlora70b: Llama-3.1-70B's QLoRA (examples/llama-3.1-70b-qlora.json,
#     layer by layer, random weights) 3 steps under 24 GiB, then under 48 GiB: the peaks
#     against the plan in every tier and category, losses, tokens/s and the
#     time to the first step;
#   plan: the single-GPU examples (gpt2, gpt2-xl fine-tune uncapped with
#     random weights, gpt2-xl with offload, gpt2-xl QLoRA, gpt2 at T 4096
#     and 8192 with as many tokens a step as at 1024) two steps each, their planned
#     peaks (zeroctl estimate's, run summary's memory_planned) against the
#     accountant's in every tier and category (goal: within 5%);
#   lora: the NF4 kernel and LoRA's products against the CPU's (test_cuda_kernels), a
#     bitsandbytes 4-bit model's files read (test_bnb_nf4), then
#     Llama-3.1-8B's shape, QLoRA and LoRA r 16 on all seven products, T
#     2048, gradient checkpointing, micro-batch 1, against transformers +
#     PEFT (+ bitsandbytes) alternated (bench/gpu/lora_vs_peft.sh; the
#     wheels of peft, accelerate and bitsandbytes from .gpu-deps/wheels);
#   examples: the Llama family's examples with random weights of their
#     shape (Llama-3.2-1B in full under 8 GiB, Llama-3.1-8B QLoRA under
#     12 GiB, Qwen2.5-7B with its optimizer on the host under 40 GiB), 10
#     steps each on the tree's docs as bytes: losses, tokens/s, GPU peak
#     against the cap, the plan against the accountant in every tier and
#     category (5%); then Llama-3.2-1B uncapped, without offload (the capped
#     run's tokens/s must be at least 0.7 of its);
#   crash: kill -9 at random moments, 5 times each, of QLoRA of
#     Llama-3.2-1B's shape with its base offloaded to the host and of gpt2
#     in full with its optimizer on the host, each resumed: every final
#     checkpoint must be the uninterrupted run's byte for byte
#     (bench/gpu/crash_resume.sh); then Llama-3.1-8B's QLoRA example
#     resumed, its time to the first step;
#   ranks: with the machine's own Open MPI (mpicxx, mpirun), a CUDA + MPI
#     build: 2 and 3 ranks sharing the GPU against the one-rank run
#     (tests/mpi_test_gpu_tier.cc), then gpt2 on 1, 2 and 3 ranks with each
#     rank's GPU peak.
#   Here:            scripts/gpu_deps.sh
#   On the GPU:      scripts/gpu_check.sh [all|kernels|breakdown|offload|largest|deepspeed|qlora70b|ranks|bench|plan|lora|examples|crash]  (carry .gpu-deps)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
section=${1:-all}
case "$section" in all | kernels | breakdown | offload | largest | deepspeed | qlora70b | ranks | bench | plan | lora | examples | crash) ;;
*) echo "gpu_check: unknown section '$section' (all, kernels, breakdown, offload, largest, deepspeed, qlora70b, ranks, bench, plan, lora, examples or crash)"; exit 2 ;;
esac
out=${OUT:-$root/gpu-results}
deps=/tmp/zerod-deps
build=/tmp/zerod-build-gpu
mkdir -p "$out"
summary=$out/summary-$section.txt
: >"$summary"
# Every log goes into one archive, $out/logs-$section.tgz, whatever the exit: the
# device tool brings back at most 8 files from $out.
logs=$(mktemp -d)
trap 'tar czf "$out/logs-$section.tgz" -C "$logs" .' EXIT
say() { echo "gpu_check: $*" | tee -a "$summary"; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nvcc --version | tail -2
  c++ --version | head -1
  cmake --version | head -1
  nproc
  # What zero-worker checks a job's host memory against where the job sets
  # no run.host_memory_limit (runtime/core/node_memory.h).
  grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
  cat /proc/self/cgroup
} >"$logs/machine.txt" 2>&1
say "machine: $(head -1 "$logs/machine.txt"); $(grep -E '^Mem(Total|Available):' "$logs/machine.txt" | tr -s ' ' | tr '\n' ' ')"

[ -f .gpu-deps/prefix.tar.xz ] || { say "no .gpu-deps/prefix.tar.xz: run scripts/gpu_deps.sh here and carry .gpu-deps"; exit 1; }
rm -rf "$deps"
mkdir -p "$deps"
tar xJf .gpu-deps/prefix.tar.xz -C "$deps"
# The anchors travel in .gpu-deps (../shared stays behind); here, beside the tree.
export ZEROD_ANCHORS=$root/.gpu-deps/anchors
[ -d "$ZEROD_ANCHORS" ] || ZEROD_ANCHORS=$root/../shared/anchors
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
# cuDNN likewise (the nvidia-cudnn wheel: libcudnn.so.9 loads its engines
# from its own folder); where the wheel is missing, the toolkit's, or none.
cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
cudnn_lib=$(ls "$cudnn"/lib/libcudnn.so* 2>/dev/null | head -1)
cudnn_flags=()
if [ -n "$cudnn_lib" ] && [ -f "$cudnn/include/cudnn_graph.h" ]; then
  cudnn_flags=(-DCUDNN_INCLUDE_DIR="$cudnn/include" -DCUDNN_LIBRARY="$cudnn_lib")
  export LD_LIBRARY_PATH=$(dirname "$cudnn_lib"):$LD_LIBRARY_PATH
fi
say "cuDNN: ${cudnn_lib:-no wheel in the Python of PyTorch; the toolkit, if it has one}"

# The ranks section builds with the machine's Open MPI, the others without.
with_mpi=OFF
with_bench=OFF
case "$section" in offload | largest | bench) with_bench=ON ;; esac  # copy_bandwidth, optim_throughput, host_sums_throughput, offload_throughput, attention_throughput
targets=()
if [ "$section" = ranks ]; then
  command -v mpicxx >/dev/null && command -v mpirun >/dev/null ||
    { say "several ranks sharing the GPU: not run, this machine has no MPI (mpirun, mpicxx)"; exit 1; }
  with_mpi=ON
  build=$build-mpi
  targets=(--target zero-worker mpi_test_gpu_tier)
fi
cuda_tests=(test_cuda_kernels test_cuda_training test_cuda_offload test_device test_nccl)
# Only what a section runs; all and plan build everything.
case "$section" in
kernels) targets=(--target zero-worker "${cuda_tests[@]}") ;;
breakdown | examples | crash) targets=(--target zero-worker) ;;
offload) targets=(--target zero-worker test_cuda_offload test_pinned_host copy_bandwidth optim_throughput host_sums_throughput) ;;
bench) targets=(--target zero-worker zero-tokenize attention_throughput) ;;
lora) targets=(--target zero-worker test_cuda_kernels test_bnb_nf4) ;;
largest) targets=(--target zero-worker offload_throughput) ;;
deepspeed | qlora70b) targets=(--target zero-worker) ;;
esac
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DZEROD_WITH_CUDA=ON -DZEROD_WITH_MPI=$with_mpi -DZEROD_WITH_GRPC=OFF -DZEROD_BUILD_BENCH=$with_bench \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$deps/usr" \
  -DNCCL_INCLUDE_DIR="$nccl_inc" -DNCCL_LIBRARY="$nccl_lib" "${cudnn_flags[@]}" >"$logs/configure.log" 2>&1 ||
  { say "configure failed"; tail -30 "$logs/configure.log"; exit 1; }
grep -E "NCCL communicator|cuDNN fused attention" "$logs/configure.log" | sed 's/^-- /gpu_check: /' | tee -a "$summary"
start=$SECONDS
cmake --build "$build" --parallel "$(nproc)" "${targets[@]}" >"$logs/build.log" 2>&1 ||
  { say "build failed"; grep -E "error|Error" "$logs/build.log" | head -30; exit 1; }
say "built in $((SECONDS - start)) s"
worker=$build/cmd/zero-worker

# The top of a run's wall_clock_breakdown table, and how long the compute
# stream and the host each waited for the other.
waits() { grep -E 'compute stream waiting|host: waiting for the device' "$1" | tail -2 | tr -s ' ' | tr '\n' ';'; }
breakdown() { echo "$(grep -A12 '^where the time went' "$1" | tr -s ' ' | tr '\n' ';')$(waits "$1")"; }

# The losses a run printed, one per line.
losses() { grep -E '^step [0-9]+/' "$1" | awk -F'|' '{print $2}' | sed 's/ *loss *//'; }
# Tokens/s of a run's steps after the first ($2 tokens a step), from the
# elapsed seconds its step lines print; "-" with fewer than two steps.
steady() {
  grep -E '^step [0-9]+/' "$1" | sed -E 's/.*\| ([0-9.]+)s elapsed.*/\1/' |
    awk -v tokens="$2" 'NR == 1 {first = $1} {last = $1; n = NR}
      END {if (n > 1 && last > first) printf "%.0f", (n - 1) * tokens / (last - first); else printf "-"}'
}

# Every kernel of one step of zero-worker run with the arguments after $1
# (the logs' name), timed by Nsight Compute (the roofline table's times):
# the 30 slowest by the table's op, and all of them together.
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ncu_step() {
  local name=$1
  shift
  [ -n "$ncu" ] || { say "Nsight Compute: none on this machine"; return 0; }
  timeout 100 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$logs/ncu-$name.csv" \
    "$worker" "$@" >"$logs/ncu-run-$name.log" 2>&1
  say "Nsight Compute, one step of $name: exit $?"
  python3 - "$logs/ncu-$name.csv" <<'PY' | tee -a "$summary"
import csv, re, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
tot = {}
for r in rows:
    name = r["Kernel Name"]
    # The table's op, or the typed function (*_as) or kernel whose lambda it ran.
    m = re.search(r"CudaKernels::(\w+)|AttentionExec::(\w+)|\b(\w+_as|adam_group)\b|(\w+_kernel)", name)
    key = next(g for g in m.groups() if g) if m else name[:60]
    if "{lambda" in name:  # the innermost lambda's number (a kernel's, not its host lambda's)
        key += " #" + re.findall(r"\{lambda[^}]*#(\d+)\}", name)[-1]
    t = float(r["Metric Value"].replace(",", "")) * {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3}[r["Metric Unit"]]
    n, s_ = tot.get(key, (0, 0.0))
    tot[key] = (n + 1, s_ + t)
for key, (n, t) in sorted(tot.items(), key=lambda kv: -kv[1][1])[:30]:
    print(f"gpu_check: kernel {key:60s} {n:5d} launches {t:10.1f} us")
print(f"gpu_check: kernels: {len(rows)} launches, {sum(t for _, t in tot.values()):.1f} us")
PY
}

if [ "$section" = kernels ]; then
  rc=0
  for t in "${cuda_tests[@]}"; do
    [ -x "$build/tests/$t" ] || continue  # test_nccl: only where NCCL was found
    OMP_NUM_THREADS=16 timeout 200 "$build/tests/$t" >"$logs/$t.log" 2>&1
    code=$?
    [ "$code" = 0 ] || rc=1
    say "$t: exit $code, $(grep -cE '^\[       OK' "$logs/$t.log") passed; $(grep -E '^\[  FAILED|SKIPPED \]' "$logs/$t.log" | sort -u | head -8 | tr '\n' ' ')"
    grep -B3 -A12 'Failure$' "$logs/$t.log" | head -60 >>"$summary"
  done
  # Shapes cuDNN's fused attention refused, and why (the table's own ran),
  # or ran a few sequences a call.
  grep -hE 'runs (unfused|fused [0-9]+ seq)' "$logs"/test_cuda_*.log | sort -u | head -12 | sed 's/^/gpu_check: /' | tee -a "$summary"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$sanitizer" ]; then
    timeout 120 "$sanitizer" --tool memcheck --error-exitcode 9 "$build/tests/test_cuda_kernels" >"$logs/memcheck.log" 2>&1
    code=$?
    [ "$code" = 0 ] || rc=1
    say "compute-sanitizer memcheck on test_cuda_kernels: exit $code, $(grep -h 'ERROR SUMMARY' "$logs/memcheck.log" | tail -1)"
  fi
  # gpt2 at B 16 and gpt2-xl at B 8, T 1024, bf16: tokens/s, and where a
  # step goes (the table's ops, launches a step).
  for shape in "gpt2 16 4" "gpt2-xl 8 3"; do
    read -r preset B steps <<<"$shape"
    timeout 150 "$worker" --config examples/gpu_gpt2.json --set "model.preset=\"$preset\"" --set train_batch_size=$B \
      --set train_micro_batch_size_per_gpu=$B --set data.kind='"text"' --set data.path='"docs/*.md"' \
      --set run.sample.tokens=0 --set run.steps=$steps --set steps_per_print=1 --set wall_clock_breakdown=true \
      >"$logs/$preset-breakdown.log" 2>&1
    code=$?
    [ "$code" = 0 ] || rc=1
    say "$preset B $B: exit $code; $(grep -E '^step ' "$logs/$preset-breakdown.log" | tail -2 | tr -s ' ' | tr '\n' ';')"
    say "$preset, where the time went: $(grep -A24 '^where the time went' "$logs/$preset-breakdown.log" | tr -s ' ' | tr '\n' ';')$(waits "$logs/$preset-breakdown.log")"
    grep -E 'error|abort|failed|runs unfused' "$logs/$preset-breakdown.log" | head -3 >>"$summary"
  done
  # Every kernel of one step of gpt2 with one layer at B 16 (the head and
  # the embedding as in gpt2, a layer's kernels once), timed by Nsight
  # Compute (NCU_VOCABS: the vocabulary sizes to run it with, GPT-2's by
  # default).
  for vocab in ${NCU_VOCABS:-50257}; do
    ncu_step "gpt2-1-layer-$vocab" --config examples/gpu_gpt2.json --set model.n_layer=1 --set model.vocab_size=$vocab \
      --set data.kind='"text"' --set data.path='"docs/*.md"' --set run.sample.tokens=0 --set run.steps=1
  done
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = offload ]; then
  rc=0
  OMP_NUM_THREADS=16 "$build/tests/test_cuda_offload" >"$logs/test_cuda_offload.log" 2>&1
  code=$?
  [ "$code" = 0 ] || rc=1
  say "test_cuda_offload: exit $code, $(grep -cE '^\[       OK' "$logs/test_cuda_offload.log") passed; $(grep -E 'FAILED|SKIPPED' "$logs/test_cuda_offload.log" | head -3 | tr '\n' ' ')"
  # Pinned memory registered by CUDA behind the allocation: the CUDA branch
  # of PinnedHost.RefusedWhereNothingCanRegisterIt, the PinnedHostOnGpu
  # tests (copies awaiting CUDA's registration, an exit with registrations
  # under way), the rest through the test's hook.
  timeout 120 "$build/tests/test_pinned_host" >"$logs/test_pinned_host.log" 2>&1
  code=$?
  [ "$code" = 0 ] || rc=1
  say "test_pinned_host: exit $code, $(grep -cE '^\[       OK' "$logs/test_pinned_host.log") passed; $(grep -E 'FAILED|SKIPPED \]' "$logs/test_pinned_host.log" | head -3 | tr '\n' ' ')"
  # gpt2-xl, random weights, optimizer on the host, the example's 32K
  # tokens a step (8 micro-batches): under 12, 8 and (parameters on the host
  # too) 4 GiB, where "auto" keeps the first layers' sums on the GPU in
  # what the cap leaves and sends the others' micro-batch gradients in
  # bf16, and uncapped without offload rounding them the same way in memory
  # (micro_batch_grads "compute"); the update is the same math on either
  # side, so the losses must be the same numbers. Four steps: the breakdown
  # and tokens/s leave out the first.
  xl=(--config examples/gpt2-xl-offload.json --set model.init_from=null --set run.steps=4 --set steps_per_print=1)
  xl_tokens=$((32 * 1024))
  timeout 130 "$worker" "${xl[@]}" --set wall_clock_breakdown=true >"$logs/xl-offload-12GiB.log" 2>&1
  say "gpt2-xl offload under 12 GiB: exit $?; $(grep -E '^done|^  gpu |micro-batch gradients' "$logs/xl-offload-12GiB.log" | head -4 | tr '\n' ' ')"
  say "gpt2-xl offload under 12 GiB, where the time went: $(breakdown "$logs/xl-offload-12GiB.log")"
  # The offload path's copies against plain cudaMemcpyAsync from pinned
  # memory, at the mean size of the run's copies each way.
  say "gpt2-xl offload's copies: $(grep -E '^  copy (host->device|device->host)' "$logs/xl-offload-12GiB.log" | tr -s ' ' | tr '\n' ';')"
  "$build/bench/copy_bandwidth" 1 2 4 8 16 64 256 >"$logs/copy_bandwidth.log" 2>&1
  say "plain cudaMemcpyAsync, pinned: exit $?; $(grep -E '^ *(MiB|[0-9]+) ' "$logs/copy_bandwidth.log" | tr -s ' ' | tr '\n' ';')"
  say "pinning host memory (what an offloaded start waits for): $(grep -E '^pinning' "$logs/copy_bandwidth.log" | tr '\n' ';')"
  say "gpt2-xl offload under 12 GiB, its start: $(grep -E '^ready' "$logs/xl-offload-12GiB.log")"
  # What the host's memory gives its cores: the host's adds and updates
  # are bound by it (the units the GPU does not update).
  timeout 60 "$build/bench/optim_throughput" 64 >"$logs/optim_throughput.log" 2>&1
  say "host memory and the host's AdamW: exit $?; $(grep -E '^triad|64M' "$logs/optim_throughput.log" | tr -s ' ' | tr '\n' ';')"
  timeout 60 "$build/bench/host_sums_throughput" 256 8 >"$logs/host_sums_throughput.log" 2>&1
  say "host sums of 8 bf16 micro-batches: exit $?; $(tail -3 "$logs/host_sums_throughput.log" | tr -s ' ' | tr '\n' ';')"
  # Under 8 GiB the default reduce buckets (5e8 elements, 16 of gpt2-xl's
  # layers staged at once: 3.9 GB) do not fit; two layers' do.
  timeout 130 "$worker" "${xl[@]}" --set run.gpu_memory_limit='"8GiB"' \
    --set zero_optimization.reduce_bucket_size=50000000 >"$logs/xl-offload-8GiB.log" 2>&1
  say "gpt2-xl offload under 8 GiB: exit $?; $(grep -E '^done|^  gpu |error|micro-batch gradients' "$logs/xl-offload-8GiB.log" | head -4 | tr '\n' ' ')"
  timeout 150 "$worker" "${xl[@]}" --set run.gpu_memory_limit='"4GiB"' \
    --set zero_optimization.reduce_bucket_size=50000000 --set zero_optimization.offload_param.device='"cpu"' \
    >"$logs/xl-offload-4GiB.log" 2>&1
  say "gpt2-xl offload (parameters too) under 4 GiB: exit $?; $(grep -E '^done|^  gpu |error|micro-batch gradients' "$logs/xl-offload-4GiB.log" | head -4 | tr '\n' ' ')"
  timeout 130 "$worker" "${xl[@]}" --set run.gpu_memory_limit=null --set zero_optimization.micro_batch_grads='"compute"' \
    --set zero_optimization.offload_optimizer.device='"none"' >"$logs/xl-plain.log" 2>&1
  say "gpt2-xl without offload, uncapped: exit $?; $(grep -E '^done|^  gpu ' "$logs/xl-plain.log" | head -3 | tr '\n' ' ')"
  # Layer by layer (zero_optimization.accumulation "layer"): each layer's
  # weights uploaded once a step rather than once a micro-batch, its
  # gradients sent to the host once; the 8 micro-batches' block inputs in
  # pinned host memory (4.8 GiB). Planned: 4.8 GiB of GPU under the 8 GiB
  # cap, 2.0 GiB under 4 GiB with the parameters offloaded. Its losses are
  # the uncapped layer-major run's (a tied head sums in its own order).
  layer=(--set zero_optimization.accumulation='"layer"' --set zero_optimization.reduce_bucket_size=50000000)
  timeout 150 "$worker" "${xl[@]}" "${layer[@]}" --set activation_checkpointing.cpu_checkpointing=true \
    --set run.gpu_memory_limit='"8GiB"' --set wall_clock_breakdown=true >"$logs/xl-layer-8GiB.log" 2>&1
  say "gpt2-xl layer by layer under 8 GiB: exit $?; $(grep -E '^done|^  gpu |error|micro-batch order' "$logs/xl-layer-8GiB.log" | head -4 | tr '\n' ' ')"
  say "gpt2-xl layer by layer under 8 GiB, where the time went: $(breakdown "$logs/xl-layer-8GiB.log")"
  timeout 150 "$worker" "${xl[@]}" "${layer[@]}" --set activation_checkpointing.cpu_checkpointing=true \
    --set run.gpu_memory_limit='"4GiB"' --set zero_optimization.offload_param.device='"cpu"' \
    >"$logs/xl-layer-4GiB.log" 2>&1
  say "gpt2-xl layer by layer (parameters too) under 4 GiB: exit $?; $(grep -E '^done|^  gpu |error|micro-batch order' "$logs/xl-layer-4GiB.log" | head -4 | tr '\n' ' ')"
  timeout 130 "$worker" "${xl[@]}" "${layer[@]}" --set run.gpu_memory_limit=null \
    --set zero_optimization.offload_optimizer.device='"none"' >"$logs/xl-layer-plain.log" 2>&1
  say "gpt2-xl layer by layer without offload, uncapped: exit $?; $(grep -E '^done|^  gpu ' "$logs/xl-layer-plain.log" | head -3 | tr '\n' ' ')"
  # Steps after the first, tokens/s, against the uncapped run's (the 12 GiB
  # run's is timed with the breakdown's waits).
  plain=$(steady "$logs/xl-plain.log" $xl_tokens)
  for run in xl-plain xl-offload-12GiB xl-offload-8GiB xl-offload-4GiB xl-layer-plain xl-layer-8GiB xl-layer-4GiB; do
    t=$(steady "$logs/$run.log" $xl_tokens)
    say "gpt2-xl, steps after the first: $run $t tokens/s$(awk -v t="$t" -v p="$plain" \
      'BEGIN {if (t != "-" && p != "-" && p > 0) printf ", %.3f of uncapped", t / p}')"
  done
  for capped in offload-12GiB offload-8GiB offload-4GiB layer-8GiB layer-4GiB; do
    uncapped=xl-plain
    case $capped in layer-*) uncapped=xl-layer-plain ;; esac
    if [ -n "$(losses "$logs/$uncapped.log")" ] && [ "$(losses "$logs/$uncapped.log")" = "$(losses "$logs/xl-$capped.log")" ]; then
      say "gpt2-xl: the $capped run's losses equal the uncapped run's ($uncapped)"
    else
      say "gpt2-xl: losses differ: $capped [$(losses "$logs/xl-$capped.log" | tr '\n' ' ')] $uncapped [$(losses "$logs/$uncapped.log" | tr '\n' ' ')]"
      rc=1
    fi
  done
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

# A JSON run log's summary: memory_planned against memory_peak, every tier
# and category; exit 1 past 5% anywhere, and the worst error said.
compare='
import json, sys
summary = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "\"summary\"" in l][-1]
worst, where = 0.0, "none"
for tier, cats in summary["memory_peak"].items():
    for cat, measured in cats.items():
        planned = summary["memory_planned"][tier][cat]
        err = abs(planned - measured) / max(measured, 1)
        if err > worst: worst, where = err, f"{tier} {cat}: planned {planned}, measured {measured}"
gpu = summary["memory_peak"]["gpu"]
print(f"gpu peak {gpu}; worst error {100 * worst:.3f}% ({where})")
sys.exit(1 if worst > 0.05 else 0)'

if [ "$section" = plan ]; then
  rc=0
  runs=("gpu_gpt2:--config examples/gpu_gpt2.json"
    "gpu_gpt2_xl_finetune:--config examples/gpu_gpt2_xl_finetune.json --set model.init_from=null --set run.gpu_memory_limit=null"
    "gpt2-xl-offload:--config examples/gpt2-xl-offload.json --set model.init_from=null"
    "gpu_gpt2_xl_qlora:--config examples/gpu_gpt2_xl_finetune.json --set model.init_from=null --set run.gpu_memory_limit=null --set model.lora={\"r\":8,\"base_quant\":\"nf4\"}"
    "gpu_gpt2_t4096:--config examples/gpu_gpt2.json --set model.block_size=4096 --set data.seq_len=4096 --set train_batch_size=4 --set train_micro_batch_size_per_gpu=4"
    "gpu_gpt2_t8192:--config examples/gpu_gpt2.json --set model.block_size=8192 --set data.seq_len=8192 --set train_batch_size=2 --set train_micro_batch_size_per_gpu=2")
  for run in "${runs[@]}"; do
    name=${run%%:*}
    # shellcheck disable=SC2086
    timeout 150 "$worker" ${run#*:} --set run.steps=2 --log-format json >"$logs/plan-$name.log" 2>&1
    code=$?
    result=$(python3 -c "$compare" "$logs/plan-$name.log" 2>&1)
    [ $? = 0 ] && [ "$code" = 0 ] || rc=1
    say "plan against the accountant, $name: exit $code; $result"
  done
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = examples ]; then
  rc=0
  # A JSON run log's losses falling, its tokens/s, and its GPU peak against
  # the cap given.
  run_figures='
import json, sys
summary = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "\"summary\"" in l][-1]
first, final, rate = summary["first_loss"], summary["final_loss"], summary["tokens_per_s"]
peak, cap = sum(summary["memory_peak"]["gpu"].values()), float(sys.argv[2]) * 2**30
print(f"loss {first:.4f} -> {final:.4f}, {rate:.0f} tokens/s, GPU peak {peak / 2**30:.2f} GiB of {sys.argv[2]}")
sys.exit(0 if final < first and peak <= cap else 1)'
  tokens() { python3 -c "$run_figures" "$1" 1000000 2>/dev/null | grep -oE '[0-9]+ tokens/s' | cut -d' ' -f1; }
  for ex in llama-3.2-1b-finetune:8 llama-3.1-8b-qlora:12 qwen2.5-7b-offload:40; do
    name=${ex%%:*} cap=${ex#*:}
    timeout 200 "$worker" --config "examples/$name.json" --set run.steps=10 --log-format json >"$logs/example-$name.log" 2>&1
    code=$?
    figures=$(python3 -c "$run_figures" "$logs/example-$name.log" "$cap" 2>&1)
    figures_ok=$?
    plan=$(python3 -c "$compare" "$logs/example-$name.log" 2>&1)
    plan_ok=$?
    [ "$code" = 0 ] && [ "$figures_ok" = 0 ] && [ "$plan_ok" = 0 ] || rc=1
    say "example $name: exit $code; $figures; plan against the accountant: $plan"
  done
  timeout 120 "$worker" --config examples/llama-3.2-1b-finetune.json --set run.gpu_memory_limit=null \
    --set 'zero_optimization={"stage":2}' --set run.steps=10 --log-format json >"$logs/example-1b-uncapped.log" 2>&1
  code=$?
  capped=$(tokens "$logs/example-llama-3.2-1b-finetune.log") uncapped=$(tokens "$logs/example-1b-uncapped.log")
  ratio=$(python3 -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")' "$capped" "$uncapped" 2>/dev/null)
  python3 -c "import sys; sys.exit(0 if float('${ratio:-0}') >= 0.7 else 1)" || rc=1
  say "Llama-3.2-1B under 8 GiB against uncapped: exit $code; ${capped:-?} against ${uncapped:-?} tokens/s: ${ratio:-?} (goal: 0.7)"
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = crash ]; then
  rc=0
  bench/gpu/crash_resume.sh "$worker" "$logs/crash" qlora-1b-offload 5 --config examples/llama-3.2-1b-finetune.json \
    --set run.gpu_memory_limit=null --set run.steps=8 --set train_batch_size=4 \
    --set 'model.lora={"r":16,"lora_alpha":32,"target_modules":"all-linear","base_quant":"nf4"}' \
    --set 'zero_optimization={"stage":3,"offload_param":{"device":"cpu"}}' 2>&1 | sed 's/^/gpu_check: /' | tee -a "$summary"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  bench/gpu/crash_resume.sh "$worker" "$logs/crash" gpt2-offload 5 --config examples/gpu_gpt2.json --set run.steps=20 \
    --set 'zero_optimization={"stage":2,"offload_optimizer":{"device":"cpu"}}' 2>&1 | sed 's/^/gpu_check: /' | tee -a "$summary"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  # Llama-3.1-8B's QLoRA: two steps saved, then resumed for a third; the
  # resumed run builds its NF4 base again before its first step.
  ck='run.checkpoint={"dir":"/tmp/zerod-crash-8b","interval":1,"keep":1}'
  rm -rf /tmp/zerod-crash-8b
  timeout 200 "$worker" --config examples/llama-3.1-8b-qlora.json --set run.steps=2 --set "$ck" --log-format json \
    >"$logs/qlora-8b-first.log" 2>&1
  code=$?
  timeout 200 "$worker" --config examples/llama-3.1-8b-qlora.json --set run.steps=3 --set "$ck" \
    --set 'run.resume="latest"' >"$logs/qlora-8b-resumed.log" 2>&1
  code2=$?
  [ "$code" = 0 ] && [ "$code2" = 0 ] || rc=1
  say "Llama-3.1-8B QLoRA resumed: exit $code, $code2; $(grep -E '^done' "$logs/qlora-8b-resumed.log")"
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = largest ]; then
  rc=0
  # The largest example: 12.8B parameters (42 layers, 13.5B, are the most
  # the plan fits in 128 GiB of host memory), 8-bit states, fp32 masters and
  # the gradient shard in pinned host memory (zeroctl estimate: 55.6 GiB
  # GPU, 120.0 GiB pinned); three steps and the time to the first. Refused
  # before anything is allocated where the machine's memory (the machine
  # line above) is less than its plan.
  timeout 240 "$worker" --config examples/gpt-12b-offload.json >"$logs/gpt-12b.log" 2>&1
  code=$?
  [ "$code" = 0 ] || rc=1
  say "gpt-12b, states on the host: exit $code; $(grep -E '^step|^done|^  (gpu|pinned|host) |error' "$logs/gpt-12b.log" | head -9 | tr '\n' ' ')"
  # 4.2B parameters, states on the host, parameters on NVMe.
  timeout 200 "$worker" --config examples/gpt-4b-offload.json --set run.steps=3 --set steps_per_print=1 \
    >"$logs/gpt-4b.log" 2>&1
  code=$?
  [ "$code" = 0 ] || rc=1
  say "gpt-4b everything offloaded: exit $code; $(grep -E '^done|^  (gpu|pinned|host|nvme) |error' "$logs/gpt-4b.log" | head -6 | tr '\n' ' ')"
  # The offload engine's file I/O on this machine's disk against fio doing
  # the same (one file, 1 MiB blocks, 8 in flight, O_DIRECT, io_uring),
  # where fio is installed.
  if ! command -v fio >/dev/null && [ -f .gpu-deps/fio_3.33.orig.tar.gz ]; then
    (rm -rf /tmp/fio-src && mkdir -p /tmp/fio-src && tar xzf .gpu-deps/fio_3.33.orig.tar.gz -C /tmp/fio-src --strip-components=1 &&
      cd /tmp/fio-src && ./configure --disable-native --disable-numa && make -j"$(nproc)" fio) >"$logs/fio-build.log" 2>&1 &&
      export PATH=/tmp/fio-src:$PATH
    say "fio built from .gpu-deps: $(command -v fio || echo failed)"
  fi
  if command -v fio >/dev/null; then
    timeout 120 "$build/bench/offload_throughput" /tmp 4096 1048576 8 32 3 >"$logs/nvme.log" 2>&1
    say "NVMe, AioEngine against fio on /tmp: exit $?; $(grep -E '^\| (read|write)' "$logs/nvme.log" | tr '\n' ';')"
  else
    say "NVMe against fio: not run, this machine has no fio"
  fi
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = qlora70b ]; then
  rc=0
  # A JSON run log's losses, tokens/s after the first step ($2 sequences of
  # $3 tokens a step), the time to the first step and where the start went.
  figures='
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
steps = [e for e in ev if e.get("event") == "step"]
tokens = int(sys.argv[2]) * int(sys.argv[3])
out = "losses %s" % [round(e["loss"], 4) for e in steps]
if len(steps) > 1:
    out += ", %.0f tokens/s after the first step" % (tokens * (len(steps) - 1) / (steps[-1]["elapsed_s"] - steps[0]["elapsed_s"]))
for e in ev:
    if e.get("event") == "summary":
        out += ", first step done %.1f s after start; start %s" % (e["time_to_first_step_s"], e.get("startup"))
print(out)'
  # Llama-3.1-70B's QLoRA (examples/llama-3.1-70b-qlora.json, layer by
  # layer), random weights of its shape, 3 steps of 2 sequences under the
  # example's 24 GiB cap: planned 12.5 GiB of GPU (zeroctl estimate);
  # the peaks in every tier and category against the plan, tokens/s after
  # the first step and the time to it (most of it the 70.6G normal draws of
  # the random base, about 2 minutes on 16 cores by bench/init_throughput's
  # rate); then the same under 48 GiB, its tokens/s beside.
  for cap in 24 48; do
    left=$((${GPU_CHECK_SECONDS:-540} - SECONDS - 10))
    [ "$left" -gt 60 ] || { say "70B QLoRA under $cap GiB: not run, no time left"; rc=1; break; }
    timeout "$left" "$worker" --config examples/llama-3.1-70b-qlora.json --set run.steps=3 --set train_batch_size=2 \
      --set run.gpu_memory_limit="\"${cap}GiB\"" --log-format json >"$logs/qlora70b-$cap.log" 2>&1
    code=$?
    [ "$code" = 0 ] || rc=1
    result=$(python3 -c "$compare" "$logs/qlora70b-$cap.log" 2>&1) || rc=1
    say "70B QLoRA under $cap GiB: exit $code; $result; $(python3 -c "$figures" "$logs/qlora70b-$cap.log" 2 2048 2>&1)"
  done
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = deepspeed ]; then
  rc=0
  # DeepSpeed 0.19.8 from .gpu-deps, DS_BUILD_OPS=0: its CPU Adam compiles
  # at run time (nvcc and ninja), here, before any run is timed.
  if [ -f .gpu-deps/deepspeed/deepspeed-0.19.8.tar.gz ] && [ -f "$ZEROD_ANCHORS/ds_offload_anchor.py" ]; then
    DS_BUILD_OPS=0 python3 -m pip install -q --no-index --find-links .gpu-deps/deepspeed --no-build-isolation \
      .gpu-deps/deepspeed/deepspeed-0.19.8.tar.gz >"$logs/ds-install.log" 2>&1
    say "DeepSpeed installed: exit $?"
    start=$SECONDS
    python3 -c 'from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()' >"$logs/ds-cpu-adam.log" 2>&1
    say "DeepSpeed's CPU Adam built: exit $? in $((SECONDS - start)) s"
  else
    say "DeepSpeed: not carried (scripts/gpu_deps.sh puts it and the anchors in .gpu-deps)"
    exit 1
  fi
  # gpt2-xl, random weights, bf16 with fp32 masters, checkpointing, T 1024,
  # 32K tokens a step, AdamW on the host, no clipping; ZeRO-2 with the
  # optimizer offloaded, then ZeRO-3 with the parameters too. DeepSpeed
  # takes the step as one micro-batch of 32 (its fastest at these tokens);
  # zerod runs its example (8 micro-batches of 4, accumulation "auto") under
  # a cap of DeepSpeed's own peak (torch.cuda.max_memory_allocated), right
  # after it. Goal: zerod at least 2x DeepSpeed's tokens/s.
  xl=(--config examples/gpt2-xl-offload.json --set model.init_from=null --set run.steps=4 --set steps_per_print=1
    --set zero_optimization.accumulation='"auto"' --set zero_optimization.reduce_bucket_size=50000000
    --set 'optimizer.params={"lr":1e-4,"betas":[0.9,0.95],"eps":1e-8,"weight_decay":0.1}')
  for stage in 2 3; do
    extra=()
    [ "$stage" = 3 ] && extra=(--set zero_optimization.offload_param.device='"cpu"')
    timeout 200 python3 "$ZEROD_ANCHORS/ds_offload_anchor.py" --stage "$stage" --mb 32 --warmup 2 --steps 3 \
      --json "$logs/ds-$stage.json" >"$logs/ds-$stage.log" 2>&1
    code=$?
    # Only a run that finished gives a peak to cap zerod with.
    peak=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(int(r["peak_gpu_gib"] * 2**30) if r["status"] == "ok" else "")' "$logs/ds-$stage.json" 2>/dev/null)
    ds=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["tokens_per_s"]))' "$logs/ds-$stage.json" 2>/dev/null)
    say "DeepSpeed ZeRO-$stage offload, micro-batch 32: exit $code; ${ds:--} tokens/s, GPU peak ${peak:--} bytes; $(grep -E '^\[cfg\]|OOM|Error' "$logs/ds-$stage.log" | head -2 | tr '\n' ' ')"
    [ -n "$peak" ] || { rc=1; continue; }
    timeout 150 "$worker" "${xl[@]}" --set zero_optimization.stage=$stage "${extra[@]}" --set run.gpu_memory_limit="$peak" \
      >"$logs/zerod-$stage.log" 2>&1
    code=$?
    z=$(steady "$logs/zerod-$stage.log" $((32 * 1024)))
    say "zerod stage $stage under DeepSpeed's peak: exit $code; $z tokens/s after the first step; $(grep -E '^  gpu |micro-batch order|^done' "$logs/zerod-$stage.log" | tr -s ' ' | tr '\n' ' ')"
    ratio=$(awk -v z="$z" -v d="$ds" 'BEGIN {if (z != "-" && d > 0) printf "%.2f", z / d; else printf "-"}')
    say "ZeRO-$stage offload: zerod / DeepSpeed = $ratio (goal 2)"
    awk -v r="$ratio" 'BEGIN {exit !(r != "-" && r >= 2)}' || rc=1
  done
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = breakdown ]; then
  rc=0
  for shape in "llama-1b llama-3.2-1b 8 2048" "qwen-1.5b qwen2.5-1.5b 8 2048" "llama-1b-8k llama-3.2-1b 1 8192"; do
    read -r name preset B T <<<"$shape"
    args=(--config examples/gpu_gpt2.json --set "model.preset=\"$preset\"" --set model.block_size="$T"
      --set data.seq_len="$T" --set train_batch_size="$B" --set train_micro_batch_size_per_gpu="$B"
      --set data.kind='"text"' --set data.path='"docs/*.md"' --set run.sample.tokens=0)
    timeout 120 "$worker" "${args[@]}" --set run.steps=3 --set steps_per_print=1 --set wall_clock_breakdown=true \
      >"$logs/$name-breakdown.log" 2>&1
    code=$?
    [ "$code" = 0 ] || rc=1
    say "$name B $B T $T: exit $code; $(grep -E '^step ' "$logs/$name-breakdown.log" | tail -2 | tr -s ' ' | tr '\n' ';')"
    grep -A40 '^where the time went' "$logs/$name-breakdown.log" | sed "s/^/gpu_check: $name /" | tee -a "$summary" >/dev/null
    grep -E 'error|abort|failed|runs (unfused|fused [0-9]+ seq)' "$logs/$name-breakdown.log" | head -3 >>"$summary"
    ncu_step "$name-1-layer" "${args[@]}" --set model.n_layer=1 --set run.steps=1
  done
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = bench ]; then
  # One round of zerod against PyTorch (bench/gpu/train_vs_torch.sh) on the
  # shapes $2 names (comma-separated: gpt2, gpt2-xl, gpt2-4k, llama-1b,
  # llama-1b-8k, qwen-1.5b;
  # gpt2, gpt2-xl and llama-1b by default), each run (two a shape) given its share of what is
  # left of GPU_CHECK_SECONDS (540 s).
  # Attention alone against PyTorch's SDPA at the bench's shapes, in turn.
  for round in 1 2; do
    timeout 180 "$build/bench/attention_throughput" >"$logs/attention-$round.log" 2>&1
    say "zerod attention, round $round: exit $?; $(tail -13 "$logs/attention-$round.log" | tr -s ' ' | tr '\n' ';')"
    grep -hE 'runs (unfused|fused [0-9]+ seq)' "$logs/attention-$round.log" | sort -u | head -6 | sed 's/^/gpu_check: /' | tee -a "$summary"
    timeout 120 python3 bench/gpu/torch_sdpa.py >"$logs/torch-sdpa-$round.log" 2>&1
    say "PyTorch SDPA, round $round: exit $?; $(tail -7 "$logs/torch-sdpa-$round.log" | tr -s ' ' | tr '\n' ';')"
  done
  # Packed instruction data against padded, each example a window: 20
  # steps of Llama-3.2-1B's shape (the fixture tokenizer's vocabulary), bf16,
  # B 4 (goal: packed >= 3x padded's targets a second at T 2048).
  ZEROD_BUILD=$build PACKING_SET='run.device="cuda" bf16.enabled=true model.n_layer=16 model.n_embd=2048
    model.n_head=32 model.n_kv_head=8 model.ffn_hidden=8192' timeout 150 bench/packing.sh 20 1024 2048 \
    >"$logs/packing.log" 2>&1
  say "packed against padded: exit $?; $(grep -E '^T ' "$logs/packing.log" | cut -c1-100 | tr -s ' ' | tr '\n' ';')"
  grep -hE 'runs (unfused|fused [0-9]+ seq)' "$logs/packing.log" | sort -u | head -4 | sed 's/^/gpu_check: /' |
    tee -a "$summary"
  left=$((${GPU_CHECK_SECONDS:-540} - SECONDS))
  shapes=${2:-gpt2,gpt2-xl,llama-1b}
  runs=$((2 * ($(tr -cd , <<<"$shapes" | wc -c) + 1)))
  bench/gpu/train_vs_torch.sh "$build" "$logs/bench" 1 $((left / runs)) "$shapes" >/dev/null 2>&1
  rc=$?
  sed 's/^/gpu_check: /' "$logs/bench/train_vs_torch.txt" | tee -a "$summary"
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = lora ]; then
  # The NF4 kernel and LoRA's products against the CPU's, a 4-bit model's files read, then
  # Llama-3.1-8B's QLoRA and LoRA against transformers + PEFT (+ bitsandbytes).
  # The section fails where a test does or the comparison gives no figure.
  rc=0
  "$build/tests/test_cuda_kernels" --gtest_filter='*Nf4*:*Lora*' >"$logs/nf4_kernel.log" 2>&1
  code=$?
  [ "$code" = 0 ] || rc=1
  say "NF4 kernel, LoRA products: exit $code; $(grep -E 'PASSED|FAILED|SKIPPED' "$logs/nf4_kernel.log" | tr '\n' ' ')"
  "$build/tests/test_bnb_nf4" >"$logs/bnb_nf4.log" 2>&1
  code=$?
  [ "$code" = 0 ] || rc=1
  say "bitsandbytes files: exit $code; $(grep -E 'PASSED|FAILED' "$logs/bnb_nf4.log" | tr '\n' ' ')"
  if ls .gpu-deps/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --user .gpu-deps/wheels/*.whl >"$logs/wheels.log" 2>&1
    say "peft, accelerate, bitsandbytes wheels: exit $?"
  fi
  left=$((${GPU_CHECK_SECONDS:-540} - SECONDS))
  bench/gpu/lora_vs_peft.sh "$build" "$logs/lora" 1 $((left / 4)) 1 >/dev/null 2>&1
  sed 's/^/gpu_check: /' "$logs/lora/lora_vs_peft.txt" | tee -a "$summary"
  # A row with no zerod figure: zerod's run failed (its log is in the archive).
  awk 'NR > 1 && $3 == "-" { bad = 1 } END { exit bad }' "$logs/lora/lora_vs_peft.txt" || rc=1
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

if [ "$section" = ranks ]; then
  rc=0
  mpi=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=4 -x LD_LIBRARY_PATH)
  for np in 2 3; do
    "${mpi[@]}" -np "$np" "$build/tests/mpi_test_gpu_tier" >"$logs/mpi_test_gpu_tier.np$np.log" 2>&1
    code=$?
    [ "$code" = 0 ] || rc=1
    say "mpi_test_gpu_tier on $np ranks: exit $code, $(grep -cE '^\[       OK' "$logs/mpi_test_gpu_tier.np$np.log") passed over the ranks; $(grep -E 'FAILED|SKIPPED|Failure' "$logs/mpi_test_gpu_tier.np$np.log" | sort -u | head -4 | tr '\n' ' ')"
  done
  # gpt2 on the GPU on 1, 2 and 3 ranks: the same global batch, each rank's
  # GPU peak in its memory table.
  for np in 1 2 3; do
    timeout 120 "${mpi[@]}" -np "$np" "$worker" --config examples/gpu_gpt2.json --set run.steps=3 --set steps_per_print=1 \
      --set train_batch_size=12 --set train_micro_batch_size_per_gpu=2 --set zero_optimization.stage=2 \
      >"$logs/gpt2-ranks$np.log" 2>&1
    code=$?
    [ "$code" = 0 ] || rc=1
    say "gpt2 stage 2 on $np ranks sharing the GPU: exit $code; losses $(losses "$logs/gpt2-ranks$np.log" | tr '\n' ' '); $(grep -E '^done|^  gpu ' "$logs/gpt2-ranks$np.log" | head -2 | tr '\n' ' ')"
  done
  say "done in $SECONDS s, exit $rc"
  exit $rc
fi

# Several tests at once, each with two OpenMP threads, on the 16 cores.
start=$SECONDS
OMP_NUM_THREADS=2 ctest --test-dir "$build" --parallel 8 --output-on-failure >"$logs/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed" "$logs/ctest.log" | sed 's/^/gpu_check: /' | tee -a "$summary"
grep -h 'runs unfused' "$build/Testing/Temporary/LastTest.log" 2>/dev/null | sort -u | head -12 | sed 's/^/gpu_check: /' |
  tee -a "$summary"
grep -E "\*\*\*|Failed  |Not Run" "$logs/ctest.log" | head -20 | tee -a "$summary"
# What was skipped, and why (only GPU tests may skip, and here none should).
grep -h -A1 "SKIPPED \]\|Skipped" "$logs/ctest.log" | head -20 | tee -a "$summary"
say "tests took $((SECONDS - start)) s, exit $rc"

# Every CUDA kernel test under compute-sanitizer.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$sanitizer" ]; then
  for tool in memcheck racecheck; do
    "$sanitizer" --tool "$tool" --error-exitcode 9 "$build/tests/test_cuda_kernels" >"$logs/sanitizer-$tool.log" 2>&1
    code=$?
    say "compute-sanitizer $tool on test_cuda_kernels: exit $code, $(grep -h 'ERROR SUMMARY' "$logs/sanitizer-$tool.log" | tail -1)"
    [ "$code" = 0 ] || rc=1
  done
else
  say "compute-sanitizer not found: the sanitizer runs did not happen"
  rc=1
fi

# Where gpt2's step time goes on the GPU: each kernel and copy, by name.
timeout 120 "$worker" --config examples/gpu_gpt2.json --set run.steps=3 --set train_batch_size=4 \
  --set train_micro_batch_size_per_gpu=4 --set wall_clock_breakdown=true >"$logs/gpt2-breakdown.log" 2>&1
say "gpt2 B 4 x T 1024: exit $?; $(grep -E '^done' "$logs/gpt2-breakdown.log")"
say "gpt2, where the time went: $(breakdown "$logs/gpt2-breakdown.log")"

# zerod's adapter files through PEFT itself: the demo model, pre-trained and
# then given adapters on every product, exported three ways (the base, the
# adapter, the merge); PeftModel.from_pretrained of the base and adapter
# must give the merged model's logits (scripts/peft_check.py).
peft=$(mktemp -d)
{
  "$worker" --config examples/demo.json --set run.steps=100 --set run.checkpoint.dir="$peft/base" &&
    "$worker" export --checkpoint "$peft/base" --out "$peft/base-hf" &&
    "$worker" --config examples/demo.json --set run.steps=100 --set run.checkpoint.dir="$peft/lora" \
      --set model.init_from="$peft/base-hf/model.safetensors" \
      --set 'model.lora={"r":4,"alpha":8,"target_modules":"all-linear"}' &&
    "$worker" export --checkpoint "$peft/lora" --out "$peft/adapter" --adapter &&
    "$worker" export --checkpoint "$peft/lora" --out "$peft/merged" --merge &&
    timeout 300 python3 scripts/peft_check.py "$peft/base-hf" "$peft/adapter" "$peft/merged"
} >"$logs/peft.log" 2>&1
code=$?
say "PEFT reads zerod's adapter: exit $code; $(tail -1 "$logs/peft.log")"
[ "$code" = 0 ] || rc=1

# QLoRA of gpt2-xl (r 8 on c_attn, NF4 base) under the same 12 GiB cap
# that refuses its full fine-tune below: it must train, and its GPU peak is
# reported beside the plan's.
timeout 150 "$worker" --config examples/gpu_gpt2_xl_finetune.json --set model.init_from=null --set run.steps=3 \
  --set 'model.lora={"r":8,"base_quant":"nf4"}' --set steps_per_print=1 >"$logs/gpt2-xl-qlora.log" 2>&1
code=$?
say "gpt2-xl QLoRA under 12 GiB: exit $code; $(grep -E '^done' "$logs/gpt2-xl-qlora.log"); $(grep -A2 '^memory peak' "$logs/gpt2-xl-qlora.log" | tr -s ' ' | tr '\n' ';')"
[ "$code" = 0 ] || rc=1
# The same at stage 3, the NF4 base's packed layers gathered and unpacked a
# layer at a time: its first loss is the base model's, as above, to the bit.
timeout 150 "$worker" --config examples/gpu_gpt2_xl_finetune.json --set model.init_from=null --set run.steps=3 \
  --set 'model.lora={"r":8,"base_quant":"nf4"}' --set zero_optimization.stage=3 --set steps_per_print=1 \
  >"$logs/gpt2-xl-qlora-stage3.log" 2>&1
code=$?
first0=$(grep -oE '^done: .*loss [0-9.]+ ->' "$logs/gpt2-xl-qlora.log" | grep -oE 'loss [0-9.]+')
first3=$(grep -oE '^done: .*loss [0-9.]+ ->' "$logs/gpt2-xl-qlora-stage3.log" | grep -oE 'loss [0-9.]+')
say "gpt2-xl QLoRA at stage 3: exit $code; first $first3 (stage 0: $first0); $(grep -A2 '^memory peak' "$logs/gpt2-xl-qlora-stage3.log" | tr -s ' ' | tr '\n' ';')"
{ [ "$code" = 0 ] && [ -n "$first0" ] && [ "$first0" = "$first3" ]; } || rc=1

# gpt2-xl bf16 with activation checkpointing under a 12 GiB cap, random
# weights, no offload: its fp32 gradients and Adam states cannot fit, so it
# must stop before the first step naming the bytes (docs/gpu.md's promise).
timeout 120 "$worker" --config examples/gpu_gpt2_xl_finetune.json --set model.init_from=null \
  --set run.steps=3 >"$logs/gpt2-xl-12GiB.log" 2>&1
code=$?
if [ "$code" = 2 ] && grep -q "run.gpu_memory_limit is .* zeroctl estimate --fit finds" "$logs/gpt2-xl-12GiB.log" &&
  ! grep -qE '^step ' "$logs/gpt2-xl-12GiB.log"; then
  say "gpt2-xl without offload under 12 GiB: refused before the first step: $(grep error "$logs/gpt2-xl-12GiB.log")"
else
  say "gpt2-xl without offload under 12 GiB: exit $code, not the refusal expected: $(tail -2 "$logs/gpt2-xl-12GiB.log" | tr '\n' ' ')"
  rc=1
fi
say "done in $SECONDS s, exit $rc"
exit $rc
