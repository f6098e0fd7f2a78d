// Raw GPU and pinned-host allocations, below Buffer, and the CUDA device's
// constructor, for code that does not include CUDA's headers. Built from
// core/gpu_memory_cuda.cu and core/cuda_device.cu with CUDA, from
// core/gpu_memory_nocuda.cc without.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/core/device.h"
#include "runtime/core/status.h"

namespace zerod {

// Number of usable CUDA devices; 0 in a build without CUDA or with no GPU.
int cuda_device_count();

absl::StatusOr<void*> gpu_alloc(size_t bytes);
void gpu_free(void* p);
// The GPU this process opened last (CudaDevice::open), -1 where it opened
// none: where a thread registering memory on another's behalf makes its
// context current, so that it opens no other GPU's. (cudaGetDevice would
// say 0 on a thread that never chose one.)
int opened_cuda_device();
// Whether pin_host can work here (a CUDA device), or why not.
absl::Status can_pin_host();
// Page-locks whole pages [p, p + bytes) of host memory for the GPU's
// copies (registered with CUDA for every context; `device` made the
// calling thread's current first where it is not -1, so that a thread
// with none opens no other GPU's), and lets them go again.
absl::Status pin_host(void* p, size_t bytes, int device);
void unpin_host(void* p);

// Copies `bytes` between any two addresses of this process, host or GPU,
// and returns once the copy is complete (a world of one's collectives).
void copy_any(void* dst, const void* src, size_t bytes);

// GPU `ordinal` as a Device (runtime/core/cuda_device.h).
absl::StatusOr<std::unique_ptr<Device>> open_cuda_device(int ordinal, MemoryAccountant& acct);

}  // namespace zerod
