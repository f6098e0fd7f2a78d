// SwiGLU's launches (swiglu.h): a thread an element of the output.
// Included by the CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/swiglu.h"

namespace zerod::cuda {

inline void swiglu_forward(cudaStream_t s, DType t, void* out, const void* inp, int64_t N, int F) {
  const Operands o{out, t};
  const ConstOperands x{inp, t};
  launch_each(s, N * F, "swiglu_forward", [=] __device__(int64_t j) { swiglu_at(j, o, x, F); });
}

inline void swiglu_backward(cudaStream_t s, DType t, void* dinp, const void* inp, const void* dout, int64_t N, int F) {
  const Operands dx{dinp, t};
  const ConstOperands x{inp, t}, dy{dout, t};
  launch_each(s, N * F, "swiglu_backward", [=] __device__(int64_t j) { swiglu_backward_at(j, dx, x, dy, F); });
}

}  // namespace zerod::cuda
