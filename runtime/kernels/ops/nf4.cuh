// NF4 dequantization's launch (nf4.h): a thread a weight. Included by the
// CUDA table alone.
#pragma once

#include <algorithm>

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/nf4.h"

namespace zerod::cuda {

// `dyn`: the signed dynamic map, in device memory.
inline void nf4_dequantize(cudaStream_t s, const QuantMap* dyn, const Nf4Tensor& t, float* out) {
  Nf4Values v;
  std::copy(nf4_values().begin(), nf4_values().end(), v.v);
  launch_each(s, t.n, "nf4_dequantize", [=] __device__(int64_t i) { out[i] = nf4_at(i, t, v, *dyn); });
}

}  // namespace zerod::cuda
