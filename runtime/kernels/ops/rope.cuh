// Rotary positions' launches (rope.h): a thread an element of the output.
// Included by the CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/rope.h"

namespace zerod::cuda {

inline void rope_forward(cudaStream_t s, DType t, void* out, const void* qkv, const float* table,
                         const RopeShape& shape, int64_t N) {
  const Operands o{out, t};
  const ConstOperands x{qkv, t};
  launch_each(s, N * shape.width(), "rope_forward",
              [=] __device__(int64_t j) { rope_at(j, o, x, table, shape, 1.0f); });
}

inline void rope_backward(cudaStream_t s, DType t, void* dqkv, const void* dout, const float* table,
                          const RopeShape& shape, int64_t N) {
  const Operands dx{dqkv, t};
  const ConstOperands dy{dout, t};
  launch_each(s, N * shape.width(), "rope_backward",
              [=] __device__(int64_t j) { rope_at(j, dx, dy, table, shape, -1.0f); });
}

}  // namespace zerod::cuda
