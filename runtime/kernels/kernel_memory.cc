#include "runtime/kernels/kernel_memory.h"

#include <omp.h>

#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/kernels/cpu/quant_map.h"
#include "runtime/kernels/cuda/attention_plan.h"
#include "runtime/kernels/cuda/rows_body.h"

namespace zerod {

int64_t KernelMemory::attention_scratch_floats(int, int T, int NH) const {
  return backend == KernelBackend::kCpu ? cpu::attention_scratch_floats(T, cpu_threads)
                                        : cuda::attention_scratch_floats(T, NH);
}

KernelMemory cpu_kernel_memory() { return {KernelBackend::kCpu, omp_get_max_threads()}; }

void KernelMemory::plan_table(MemoryPlan& plan) const {
  if (backend != KernelBackend::kCuda) return;
  plan.add_device("cuBLAS workspace", Category::kWorkspace, kCudaBlasWorkspace);
  plan.add_device("column partials", Category::kWorkspace, cuda::kColumnPartials * sizeof(float));
  plan.add_device("8-bit quantization maps", Category::kWorkspace, 2 * sizeof(QuantMap));
}

}  // namespace zerod
