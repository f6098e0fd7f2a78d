#include "runtime/kernels/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace zerod::cpu {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const bool one_call = M * N * K <= kSgemmOneCall;
  const int64_t tm = one_call ? std::max<int64_t>(M, 1) : kSgemmTile, tn = one_call ? std::max<int64_t>(N, 1) : kSgemmTile;
  const int64_t rows = (M + tm - 1) / tm, cols = (N + tn - 1) / tn;
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  // Always a parallel region, even for one tile: outside one, OpenBLAS
  // would split the call among the threads itself.
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < rows * cols; ++t) {
    const int64_t i = t / cols * tm, j = t % cols * tn;
    const int64_t m = std::min(tm, M - i), n = std::min(tn, N - j);
    // Row i of op(A) and column j of op(B) where they are stored.
    const float* a = trans_a ? A + i : A + i * lda;
    const float* b = trans_b ? B + j * ldb : B + j;
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(K), alpha, a,
                static_cast<int>(lda), b, static_cast<int>(ldb), beta, C + i * ldc + j, static_cast<int>(ldc));
  }
}

double measure_sgemm_flops() {
  constexpr int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * n * n * n / s);
  }
  return best;
}

}  // namespace zerod::cpu
