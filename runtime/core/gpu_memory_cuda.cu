// CUDA implementation of the raw allocations (core/gpu_memory.h).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/pinned_host.h"

namespace zerod {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace {
// Set by the first GPU allocation: until then no pointer of this process is
// GPU memory, and a CPU run never starts CUDA (a context costs GPU memory
// and threads on a machine whose GPUs others use).
std::atomic<bool> gpu_allocated{false};
}  // namespace

absl::StatusOr<void*> gpu_alloc(size_t bytes) {
  gpu_allocated.store(true, std::memory_order_relaxed);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
  }
  return p;
}

void gpu_free(void* p) {
  if (p) cudaFree(p);
}

absl::Status can_pin_host() {
  if (cuda_device_count() > 0) return absl::OkStatus();
  return absl::FailedPreconditionError("pinned host memory requested, but no CUDA device is usable here");
}

absl::Status pin_host(void* p, size_t bytes, int device) {
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cudaSetDevice(", device, ") to register ", bytes, " bytes of host memory failed"));
  }
  const cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaHostRegister of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

void unpin_host(void* p) {
  // A failure left set would be blamed on the thread's next kernel launch.
  if (p && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

namespace {

bool on_gpu(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

}  // namespace

void copy_any(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (!gpu_allocated.load(std::memory_order_relaxed) || (!on_gpu(dst) && !on_gpu(src))) {
    std::memcpy(dst, src, bytes);
    return;
  }
  await_pinned(dst, bytes).IgnoreError();  // as Device::copy
  await_pinned(src, bytes).IgnoreError();
  // cudaMemcpy returns before a device-to-device copy ends: wait for it.
  cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "zerod: copy of %zu bytes failed: %s\n", bytes, cudaGetErrorString(err));
    std::abort();
  }
}

}  // namespace zerod
