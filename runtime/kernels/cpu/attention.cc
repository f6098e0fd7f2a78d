#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "runtime/kernels/cpu/cpu_kernels.h"

namespace zerod::cpu {

// Per (batch, head): S = QK^T / sqrt(hs), P = causal softmax(S), Y = PV, all
// as single-threaded sgemm calls inside one parallel loop over the heads.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t C3 = 3 * int64_t(C);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* p = att + (int64_t(b) * NH + h) * T * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, p, T);
      for (int t = 0; t < T; ++t) {
        float* row = p + int64_t(t) * T;
        float mx = row[0];
        for (int s = 1; s <= t; ++s) mx = std::max(mx, row[s]);
        float sum = 0.0f;
        for (int s = 0; s <= t; ++s) {
          row[s] = std::exp(row[s] - mx);
          sum += row[s];
        }
        const float inv = 1.0f / sum;
        for (int s = 0; s <= t; ++s) row[s] *= inv;
        std::fill(row + t + 1, row + T, 0.0f);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, v, C3, 0.0f,
                  out + int64_t(b) * T * C + h * hs, C);
    }
  }
}

int64_t attention_scratch_floats(int T, int threads) { return int64_t(threads) * T * T; }
int64_t attention_scratch_floats(int T) { return attention_scratch_floats(T, omp_get_max_threads()); }

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, float* scratch, int B,
                        int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t C3 = 3 * int64_t(C);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      float* ds = scratch + int64_t(omp_get_thread_num()) * T * T;
      const float* q = qkv + b * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + b * T * C3 + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = att + (int64_t(b) * NH + h) * T * T;
      const float* dy = dout + int64_t(b) * T * C + h * hs;
      // dP = dY V^T, dV = P^T dY.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, ds, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, dy, C, 0.0f, dv, C3);
      // Softmax backward: dS = P * (dP - sum(dP * P)); zero where P is masked.
      for (int t = 0; t < T; ++t) {
        float* row = ds + int64_t(t) * T;
        const float* prow = p + int64_t(t) * T;
        float dot = 0.0f;
        for (int s = 0; s <= t; ++s) dot += row[s] * prow[s];
        for (int s = 0; s <= t; ++s) row[s] = prow[s] * (row[s] - dot);
        std::fill(row + t + 1, row + T, 0.0f);
      }
      // dQ = dS K * scale, dK = dS^T Q * scale.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, ds, T, k, C3, 0.0f, dq, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, ds, T, q, C3, 0.0f, dk, C3);
    }
  }
}

}  // namespace zerod::cpu
