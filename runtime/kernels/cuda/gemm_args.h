// The row-major matrix products of the layers as column-major gemm calls
// (cuBLAS's convention): C = alpha op(A) op(B) + beta C, C being m x n and
// the inner dimension k; a batched call repeats it `batch` times, each
// operand `stride_*` floats past the one before. A row-major X[r, c] is the column-major X^T, so each
// product is taken transposed. Plain C++, so that tests/test_cuda_bodies.cc
// runs every one through a column-major BLAS on the CPU against the CPU
// kernels.
#pragma once

#include <cstdint>

namespace zerod::cuda {

struct ColMajorGemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float beta;
  float* C;
  int64_t ldc;
  float alpha = 1.0f;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// out[N, OC] (+)= inp[N, C] @ w[C, OC]: out^T = w^T inp^T.
inline ColMajorGemm matmul_forward_gemm(float* out, const float* inp, const float* w, int64_t N, int C, int OC,
                                        float beta) {
  return {false, false, OC, N, C, w, OC, inp, C, beta, out, OC};
}

// dinp[N, C] = dout[N, OC] @ w^T: dinp^T = w dout^T, w^T being w read as [OC, C].
inline ColMajorGemm matmul_dinp_gemm(float* dinp, const float* dout, const float* w, int64_t N, int C, int OC) {
  return {true, false, C, N, OC, w, OC, dout, OC, 0.0f, dinp, C};
}

// dw[C, OC] += inp^T @ dout: dw^T = dout^T inp.
inline ColMajorGemm matmul_dw_gemm(float* dw, const float* dout, const float* inp, int64_t N, int C, int OC) {
  return {false, true, OC, C, N, dout, OC, inp, C, 1.0f, dw, OC};
}

// logits[rows, V] = inp[rows, C] (rows inp_stride apart) @ wte[V, C]^T:
// logits^T = wte inp^T.
inline ColMajorGemm logits_gemm(float* logits, const float* inp, int64_t inp_stride, const float* wte, int64_t rows,
                                int C, int V) {
  return {true, false, V, rows, C, wte, C, inp, inp_stride, 0.0f, logits, V};
}

// dinp[rows, C] = dlogits[rows, V] @ wte[V, C]: dinp^T = wte^T dlogits^T.
inline ColMajorGemm head_dinp_gemm(float* dinp, const float* dlogits, const float* wte, int64_t rows, int C, int V) {
  return {false, false, C, rows, V, wte, C, dlogits, V, 0.0f, dinp, C};
}

// dwte[V, C] += dlogits^T @ inp[rows, C]: dwte^T = inp^T dlogits.
inline ColMajorGemm head_dwte_gemm(float* dwte, const float* dlogits, const float* inp, int64_t rows, int C, int V) {
  return {false, true, C, V, rows, inp, C, dlogits, V, 1.0f, dwte, C};
}

}  // namespace zerod::cuda
