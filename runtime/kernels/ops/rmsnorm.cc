// RMSNorm on the CPU: rmsnorm.h's bodies, a row a thread.
#include "runtime/kernels/ops/rmsnorm.h"

#include <omp.h>

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

}  // namespace zerod::cpu
