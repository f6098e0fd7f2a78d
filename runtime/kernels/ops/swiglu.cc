// SwiGLU on the CPU: swiglu.h's bodies, an element at a time across cores.
#include "runtime/kernels/ops/swiglu.h"

namespace zerod::cpu {

void swiglu_forward(float* out, const float* inp, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * F; ++j) cuda::swiglu_at(j, out, inp, F);
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * F; ++j) cuda::swiglu_backward_at(j, dinp, inp, dout, F);
}

}  // namespace zerod::cpu
