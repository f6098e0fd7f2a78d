#include "runtime/core/gpu_memory.h"

#include <cstring>

namespace zerod {

int cuda_device_count() { return 0; }

absl::StatusOr<void*> gpu_alloc(size_t) {
  return absl::FailedPreconditionError("GPU memory requested, but zerod was built without CUDA");
}
void gpu_free(void*) {}

int opened_cuda_device() { return -1; }

absl::Status can_pin_host() {
  return absl::FailedPreconditionError("pinned host memory requested, but zerod was built without CUDA");
}

absl::Status pin_host(void*, size_t, int) { return can_pin_host(); }
void unpin_host(void*) {}

void copy_any(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

absl::StatusOr<std::unique_ptr<Device>> open_cuda_device(int, MemoryAccountant&) {
  return absl::FailedPreconditionError("zerod was built without CUDA (ZEROD_WITH_CUDA=OFF)");
}

}  // namespace zerod
