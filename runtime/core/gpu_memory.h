// Raw GPU and pinned-host allocations, below Buffer. Built from
// core/gpu_memory_cuda.cu with CUDA and from core/gpu_memory_nocuda.cc without.
#pragma once

#include <cstddef>

#include "runtime/core/status.h"

namespace zerod {

// Number of usable CUDA devices; 0 in a build without CUDA or with no GPU.
int cuda_device_count();

absl::StatusOr<void*> gpu_alloc(size_t bytes);
void gpu_free(void* p);
absl::StatusOr<void*> pinned_alloc(size_t bytes);
void pinned_free(void* p);

}  // namespace zerod
