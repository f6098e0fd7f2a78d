// A layer's product on the CPU: OpenBLAS's (cpu/gemm.h), and the bias
// gradient's column sums, a thread a range of columns (matmul.h).
#include "runtime/kernels/ops/matmul.h"

#include <omp.h>

#include <algorithm>

#include "runtime/kernels/cpu/gemm.h"

namespace zerod::cpu {

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int C, int OC) {
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::copy(bias, bias + OC, out + n * OC);
    beta = 1.0f;
  }
  sgemm(false, false, N, OC, C, 1.0f, inp, C, w, OC, beta, out, OC);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int C, int OC) {
  if (dinp) sgemm(false, true, N, C, OC, 1.0f, dout, OC, w, OC, 0.0f, dinp, C);
  if (dw) sgemm(true, false, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, OC);
  if (!dbias) return;
    // Each thread owns a range of columns and sums them down the rows in order.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int lo = static_cast<int>(int64_t(OC) * t / nt), hi = static_cast<int>(int64_t(OC) * (t + 1) / nt);
    for (int64_t n = 0; n < N; ++n) {
      const float* row = dout + n * OC;
      for (int o = lo; o < hi; ++o) dbias[o] += row[o];
    }
  }
}

}  // namespace zerod::cpu
