// NF4 dequantization's launch (nf4.h): a linear layer's weight, held
// [out, in], into its product's operands [in, ld]. Included by the CUDA
// table alone.
#pragma once

#include <algorithm>

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/nf4.h"

namespace zerod::cuda {

template <DType kT>
void nf4_dequantize_transposed(cudaStream_t s, const Nf4Tensor& t, const Nf4Transpose& d, void* out) {
  Nf4Values v;
  std::copy(nf4_values().begin(), nf4_values().end(), v.v);
  launch_each(s, d.threads(), "nf4_dequantize",
              [=] __device__(int64_t k) { nf4_transposed_run<kT>(k, t, d, v, out); });
}

}  // namespace zerod::cuda
