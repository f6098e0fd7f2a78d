#include "runtime/core/device.h"

#include "absl/strings/str_cat.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/gpu_memory.h"

namespace zerod {

absl::StatusOr<Buffer> Device::allocate(uint64_t bytes, Category c, Tier t) {
  return Buffer::allocate(bytes, c, t, *acct_);
}

absl::StatusOr<std::unique_ptr<Device>> open_device(std::string_view name, MemoryAccountant& acct) {
  // No GPU device is built yet, so "auto" is the CPU everywhere.
  if (name == "cpu" || name == "auto") return std::make_unique<CpuDevice>(acct);
  if (name == "cuda") {
#ifdef ZEROD_WITH_CUDA
    const int n = cuda_device_count();
    return absl::FailedPreconditionError(absl::StrCat(
        "run.device 'cuda': this build has no GPU device to train on yet (", n, " CUDA device",
        n == 1 ? "" : "s", " visible); use 'cpu' or 'auto'"));
#else
    return absl::FailedPreconditionError(
        "run.device 'cuda': zerod was built without CUDA (ZEROD_WITH_CUDA=OFF); use 'cpu' or 'auto'");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("run.device: unknown device '", std::string(name), "' (expected cpu, cuda or auto)"));
}

}  // namespace zerod
