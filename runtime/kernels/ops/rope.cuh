// Rotary positions' launches (rope.h): a thread a pair, in place.
// Included by the CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/rope.h"

namespace zerod::cuda {

inline void rope_in_place(cudaStream_t s, DType t, void* qkv, const float* table, const RopeShape& shape, int64_t N,
                          float sign, const char* name) {
  const Operands x{qkv, t};
  launch_each(s, N * shape.pairs(), name, [=] __device__(int64_t j) { rope_pair_at(j, x, table, shape, sign); });
}

}  // namespace zerod::cuda
