// The CUDA kernel table (runtime/kernels/kernels.h) for a CudaDevice,
// declared without CUDA's headers for kernels_for.
#pragma once

#include <memory>

#include "runtime/kernels/kernels.h"

namespace zerod {

// Its operands are of type `precision` (fp32, bf16 or fp16).
absl::StatusOr<std::unique_ptr<Kernels>> cuda_kernels(Device& device, DType precision);

}  // namespace zerod
