// LayerNorm on the CPU, a row a thread, each sum in index order: the
// reference of layernorm.h's bodies.
#include "runtime/kernels/ops/layernorm.h"

#include <omp.h>

#include <cmath>

namespace zerod::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float m = 0.0f;
    for (int i = 0; i < C; ++i) m += x[i];
    m /= C;
    float v = 0.0f;
    for (int i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    v /= C;
    const float s = 1.0f / std::sqrt(v + kLayerNormEps);
    float* o = out + n * C;
    for (int i = 0; i < C; ++i) o[i] = (x[i] - m) * s * w[i] + b[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    const float m = mean[n], s = rstd[n];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = 0; i < C; ++i) {
      const float dnorm = dy[i] * w[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[i] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    float* dx = dinp + n * C;
    for (int i = 0; i < C; ++i) {
      const float norm = (x[i] - m) * s;
      dx[i] += (dy[i] * w[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  if (!dw) return;
    // Weight and bias gradients: each thread sums its columns down the rows.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int lo = static_cast<int>(int64_t(C) * t / nt), hi = static_cast<int>(int64_t(C) * (t + 1) / nt);
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const float m = mean[n], s = rstd[n];
      for (int i = lo; i < hi; ++i) {
        dw[i] += dy[i] * (x[i] - m) * s;
        db[i] += dy[i];
      }
    }
  }
}

}  // namespace zerod::cpu
