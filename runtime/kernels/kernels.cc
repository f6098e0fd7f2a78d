#include "runtime/kernels/kernels.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "runtime/core/cpu_device.h"
#include "runtime/kernels/cpu_table.h"
#ifdef ZEROD_WITH_CUDA
#include "runtime/kernels/cuda_table.h"
#endif

namespace zerod {

absl::StatusOr<std::unique_ptr<Kernels>> kernels_for(Device& device, DType precision) {
  if (dynamic_cast<CpuDevice*>(&device)) return cpu_kernels();
#ifdef ZEROD_WITH_CUDA
  if (device.memory_tier() == Tier::kGpu) return cuda_kernels(device, precision);
#else
  (void)precision;
#endif
  return absl::UnimplementedError(absl::StrCat("no kernel table for device ", device.name()));
}

void token_order(const int32_t* tokens, int64_t n, int32_t* order) {
  std::iota(order, order + n, 0);
  std::stable_sort(order, order + n, [tokens](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
}

KernelMemory kernel_memory_for(const Device& device) {
  if (dynamic_cast<const CpuDevice*>(&device)) return cpu_kernel_memory();
  return {KernelBackend::kCuda};
}

}  // namespace zerod
