// Rotary positions' launches (rope.h), in place: 16 bytes of each half a
// thread where hd and the pointer allow, else a pair a thread. Included
// by the CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/rope.h"

namespace zerod::cuda {

// (At namespace scope: nvcc takes no extended lambda inside a generic one.)
template <DType kT>
void rope_in_place_as(cudaStream_t s, void* qkv, const float* table, const RopeShape& shape, int64_t N, float sign,
                      const char* name) {
  if (const int64_t vectors = rope_vectors<kT>(N, shape, qkv)) {
    launch_each(s, vectors, name, [=] __device__(int64_t v) { rope_vec_at<kT>(v, qkv, table, shape, sign); });
    return;
  }
  const Operands x{qkv, kT};
  launch_each(s, N * shape.pairs(), name, [=] __device__(int64_t j) { rope_pair_at(j, x, table, shape, sign); });
}

inline void rope_in_place(cudaStream_t s, DType t, void* qkv, const float* table, const RopeShape& shape, int64_t N,
                          float sign, const char* name) {
  for_operands(t, [&](auto k) { rope_in_place_as<decltype(k)::value>(s, qkv, table, shape, N, sign, name); });
}

}  // namespace zerod::cuda
