// The row-major matrix products of the layers as column-major gemm calls
// (cuBLAS's convention): C = alpha op(A) op(B) + beta C (+ bias[i] on row
// i, the epilogue), C being m x n and the inner dimension k; a batched call
// repeats it `batch` times, each operand `stride_*` elements past the one
// before. A row-major X[r, c] is the column-major X^T, so each product is
// taken transposed. The elements' types are the caller's (the CUDA
// table's operands, or fp32). Plain C++, so that tests/test_cuda_bodies.cc
// runs every one through a column-major BLAS on the CPU against the CPU
// kernels.
#pragma once

#include <cstdint>

namespace zerod::cuda {

struct ColMajorGemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const void* A;
  int64_t lda;
  const void* B;
  int64_t ldb;
  float beta;
  void* C;
  int64_t ldc;
  float alpha = 1.0f;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  const void* bias = nullptr;  // [m], of C's type; unbatched
};

// out[N, OC] = inp[N, C] @ w[C, OC] (+ bias[OC] on every row): out^T =
// w^T inp^T (+ bias on every column).
inline ColMajorGemm matmul_forward_gemm(void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                                        int OC) {
  ColMajorGemm g{false, false, OC, N, C, w, OC, inp, C, 0.0f, out, OC};
  g.bias = bias;
  return g;
}

// dinp[N, C] = dout[N, OC] @ w^T: dinp^T = w dout^T, w^T being w read as [OC, C].
inline ColMajorGemm matmul_dinp_gemm(void* dinp, const void* dout, const void* w, int64_t N, int C, int OC) {
  return {true, false, C, N, OC, w, OC, dout, OC, 0.0f, dinp, C};
}

// dw[C, OC] += inp^T @ dout: dw^T = dout^T inp.
inline ColMajorGemm matmul_dw_gemm(float* dw, const void* dout, const void* inp, int64_t N, int C, int OC) {
  return {false, true, OC, C, N, dout, OC, inp, C, 1.0f, dw, OC};
}

// logits[rows, V] (rows ld apart) = inp[rows, C] (rows inp_stride apart)
// @ wte[V, C]^T: logits^T = wte inp^T.
inline ColMajorGemm logits_gemm(void* logits, int64_t ld, const void* inp, int64_t inp_stride, const void* wte,
                                int64_t rows, int C, int V) {
  return {true, false, V, rows, C, wte, C, inp, inp_stride, 0.0f, logits, ld};
}

// dinp[rows, C] = dlogits[rows, V] (rows ld apart) @ wte[V, C]: dinp^T =
// wte^T dlogits^T.
inline ColMajorGemm head_dinp_gemm(void* dinp, const void* dlogits, int64_t ld, const void* wte, int64_t rows, int C,
                                   int V) {
  return {false, false, C, rows, V, wte, C, dlogits, ld, 0.0f, dinp, C};
}

// dwte[V, C] += dlogits^T @ inp[rows, C]: dwte^T = inp^T dlogits.
inline ColMajorGemm head_dwte_gemm(float* dwte, const void* dlogits, int64_t ld, const void* inp, int64_t rows, int C,
                                   int V) {
  return {false, true, C, V, rows, inp, C, dlogits, ld, 1.0f, dwte, C};
}

}  // namespace zerod::cuda
