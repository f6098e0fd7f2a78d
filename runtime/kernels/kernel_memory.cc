#include "runtime/kernels/kernel_memory.h"

#include <omp.h>

#include <algorithm>

#include "runtime/kernels/ops/attention.h"
#include "runtime/kernels/ops/attention_plan.h"
#include "runtime/kernels/ops/quant_map.h"
#include "runtime/kernels/ops/rows.h"

namespace zerod {

int64_t KernelMemory::attention_scratch_floats(int B, int T, int C, int NH, DType operands) const {
  if (backend == KernelBackend::kCpu) return cpu::attention_scratch_floats(T, cpu_threads);
  // 16-bit operands are widened for attention's fp32 products: qkv and
  // its gradient, and the output or its gradient (ops/attention.cuh).
  // cuDNN's fused attention, where it runs, takes its row sums and its
  // workspace from the same bytes (or, past them, leaves the shape to
  // these kernels).
  const int64_t widened = operands == DType::kF32 ? 0 : 7 * int64_t(B) * T * C;
  return cuda::attention_scratch_floats(T, NH) + widened;
}

int64_t KernelMemory::logits_rows(int V, int64_t N) const {
  const int64_t chunk = backend == KernelBackend::kCpu ? int64_t{1} << 23 : int64_t{1} << 26;
  return std::clamp<int64_t>(chunk / logits_stride(V), 1, N);
}

int64_t KernelMemory::logits_stride(int V) const {
  return backend == KernelBackend::kCpu ? V : (int64_t(V) + 63) / 64 * 64;
}

KernelMemory cpu_kernel_memory() { return {KernelBackend::kCpu, omp_get_max_threads()}; }

void KernelMemory::plan_table(MemoryPlan& plan) const {
  if (backend != KernelBackend::kCuda) return;
  plan.add_device("cuBLAS workspace", Category::kWorkspace, kCudaBlasWorkspace);
  plan.add_device("column partials", Category::kWorkspace, cuda::kColumnPartials * sizeof(float));
  plan.add_device("8-bit quantization maps", Category::kWorkspace, 2 * sizeof(QuantMap));
}

}  // namespace zerod
