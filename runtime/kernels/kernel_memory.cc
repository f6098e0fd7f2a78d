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
  if (backend == KernelBackend::kCpu) return std::clamp<int64_t>((int64_t{1} << 23) / logits_stride(V), 1, N);
  // wte's fp32 gradient is read and written once a chunk, 8 V C bytes
  // against the product's 2 rows V C flops: at 1024 rows, 256 flops a
  // byte whatever V, past an H200's ridge (206) and near an H100's (295).
  return std::clamp<int64_t>(std::max<int64_t>((int64_t{1} << 26) / logits_stride(V), 1024), 1, N);
}

int64_t KernelMemory::logits_stride(int V) const {
  return backend == KernelBackend::kCpu ? V : (int64_t(V) + 63) / 64 * 64;
}

KernelMemory cpu_kernel_memory() { return {KernelBackend::kCpu, omp_get_max_threads()}; }

std::vector<BufferSpec> KernelMemory::table_buffers() const {
  const int cuda = backend == KernelBackend::kCuda ? 1 : 0;
  return {{"cuBLAS workspace", Category::kWorkspace, kCudaBlasWorkspace, cuda},
          {"column partials", Category::kWorkspace, cuda::kColumnPartials * sizeof(float), cuda},
          {"8-bit quantization maps", Category::kWorkspace, 2 * sizeof(QuantMap), cuda}};
}

}  // namespace zerod
