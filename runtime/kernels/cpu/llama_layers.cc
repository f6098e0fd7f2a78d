// The Llama family's layers on the CPU: the bodies of
// cuda/llama_body.h, a row or an element at a time, across cores.
#include <omp.h>

#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/kernels/cuda/llama_body.h"
#include "runtime/kernels/cuda/rows_body.h"

namespace zerod::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float r = cuda::rmsnorm_rstd(cuda::row_squares_about(x, C, 0.0f, 0, 1), C, eps);
    cuda::rmsnorm_write(out + n * C, x, w, C, r, 0, 1);
    rstd[n] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *x = inp + n * C, *dy = dout + n * C;
    const float sum = cuda::rmsnorm_backward_sum(dy, x, w, rstd[n], C, 0, 1);
    cuda::rmsnorm_backward_write(dinp + n * C, dy, x, w, rstd[n], sum, C, 0, 1);
  }
  if (!dw) return;
  // Each thread sums its columns down the rows, in order.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int lo = static_cast<int>(int64_t(C) * t / nt), hi = static_cast<int>(int64_t(C) * (t + 1) / nt);
    for (int64_t n = 0; n < N; ++n) {
      const float *x = inp + n * C, *dy = dout + n * C;
      for (int i = lo; i < hi; ++i) dw[i] += dy[i] * (x[i] * rstd[n]);
    }
  }
}

void swiglu_forward(float* out, const float* inp, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * F; ++j) cuda::swiglu_at(j, out, inp, F);
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * F; ++j) cuda::swiglu_backward_at(j, dinp, inp, dout, F);
}

void rope_forward(float* out, const float* qkv, const float* table, const RopeShape& s, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * 3 * s.C(); ++j) cuda::rope_forward_at(j, out, qkv, table, s);
}

void rope_backward(float* dqkv, const float* dout, const float* table, const RopeShape& s, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * s.width(); ++j) cuda::rope_backward_at(j, dqkv, dout, table, s);
}

}  // namespace zerod::cpu
