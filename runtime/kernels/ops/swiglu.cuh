// SwiGLU's launches (swiglu.h): 16 bytes of each operand a thread where F
// and the pointers allow, else an element a thread. Included by the CUDA
// table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/swiglu.h"

namespace zerod::cuda {

// (At namespace scope: nvcc takes no extended lambda inside a generic one.)
template <DType kT>
void swiglu_forward_as(cudaStream_t s, void* out, const void* inp, int64_t N, int F) {
  if (const int64_t vectors = swiglu_vectors<kT>(N, F, out, inp, nullptr)) {
    launch_each(s, vectors, "swiglu_forward", [=] __device__(int64_t v) { swiglu_vec_at<kT>(v, out, inp, F); });
    return;
  }
  const Operands o{out, kT};
  const ConstOperands x{inp, kT};
  launch_each(s, N * F, "swiglu_forward", [=] __device__(int64_t j) { swiglu_at(j, o, x, F); });
}
template <DType kT>
void swiglu_backward_as(cudaStream_t s, void* dinp, const void* inp, const void* dout, int64_t N, int F) {
  if (const int64_t vectors = swiglu_vectors<kT>(N, F, dinp, inp, dout)) {
    launch_each(s, vectors, "swiglu_backward",
                [=] __device__(int64_t v) { swiglu_backward_vec_at<kT>(v, dinp, inp, dout, F); });
    return;
  }
  const Operands dx{dinp, kT};
  const ConstOperands x{inp, kT}, dy{dout, kT};
  launch_each(s, N * F, "swiglu_backward", [=] __device__(int64_t j) { swiglu_backward_at(j, dx, x, dy, F); });
}

inline void swiglu_forward(cudaStream_t s, DType t, void* out, const void* inp, int64_t N, int F) {
  for_operands(t, [&](auto k) { swiglu_forward_as<decltype(k)::value>(s, out, inp, N, F); });
}
inline void swiglu_backward(cudaStream_t s, DType t, void* dinp, const void* inp, const void* dout, int64_t N, int F) {
  for_operands(t, [&](auto k) { swiglu_backward_as<decltype(k)::value>(s, dinp, inp, dout, N, F); });
}

}  // namespace zerod::cuda
