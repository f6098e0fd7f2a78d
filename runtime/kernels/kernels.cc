#include "runtime/kernels/kernels.h"

#include "absl/strings/str_cat.h"
#include "runtime/core/cpu_device.h"
#include "runtime/kernels/cpu/cpu_table.h"
#ifdef ZEROD_WITH_CUDA
#include "runtime/kernels/cuda/cuda_table.h"
#endif

namespace zerod {

absl::StatusOr<std::unique_ptr<Kernels>> kernels_for(Device& device) {
  if (dynamic_cast<CpuDevice*>(&device)) return cpu_kernels();
#ifdef ZEROD_WITH_CUDA
  if (device.memory_tier() == Tier::kGpu) return cuda_kernels(device);
#endif
  return absl::UnimplementedError(absl::StrCat("no kernel table for device ", device.name()));
}

KernelMemory kernel_memory_for(const Device& device) {
  if (dynamic_cast<const CpuDevice*>(&device)) return cpu_kernel_memory();
  return {KernelBackend::kCuda};
}

}  // namespace zerod
