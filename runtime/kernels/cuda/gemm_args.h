// The row-major matrix products of the layers as column-major gemm calls
// (cuBLAS's convention): C = alpha op(A) op(B) + beta C (+ bias[i] on row
// i, the epilogue; then the GELU epilogue, below), C being m x n and the
// inner dimension k; a batched call repeats it `batch` times, each operand
// `stride_*` elements past the one before. A row-major X[r, c] is the
// column-major X^T, so each product is taken transposed. The elements'
// types are the caller's (the CUDA table's operands, or fp32). Plain C++,
// so that tests/test_cuda_bodies.cc runs every one (its epilogue too)
// through a column-major BLAS on the CPU against the CPU kernels.
#pragma once

#include <cstdint>

namespace zerod::cuda {

// What cuBLASLt's epilogue does with the product P (bias added) of an
// unbatched call: kGeluAux writes P to aux (m x n, column-major, aux_ld)
// and gelu(P) to C (CUBLASLT_EPILOGUE_GELU_AUX[_BIAS]); kGeluGrad writes
// P * gelu'(aux) to C (CUBLASLT_EPILOGUE_DGELU), aux the first's P.
enum class GemmEpilogue { kNone, kGeluAux, kGeluGrad };

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
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  const void* aux = nullptr;  // of C's type; written by kGeluAux
  int64_t aux_ld = 0;
};

// out[N, OC] = inp[N, C] @ w[C, OC] (+ bias[OC] on every row): out^T =
// w^T inp^T (+ bias on every column).
inline ColMajorGemm matmul_forward_gemm(void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                                        int OC) {
  ColMajorGemm g{false, false, OC, N, C, w, OC, inp, C, 0.0f, out, OC};
  g.bias = bias;
  return g;
}

// The same with GELU as its epilogue: pre[N, OC] = inp @ w (+ bias), out =
// gelu(pre); pre, row-major, is the column-major aux of ld OC.
inline ColMajorGemm matmul_gelu_forward_gemm(void* out, void* pre, const void* inp, const void* w, const void* bias,
                                             int64_t N, int C, int OC) {
  ColMajorGemm g = matmul_forward_gemm(out, inp, w, bias, N, C, OC);
  g.epilogue = GemmEpilogue::kGeluAux;
  g.aux = pre;
  g.aux_ld = OC;
  return g;
}

// dinp[N, C] = dout[N, OC] @ w^T: dinp^T = w dout^T, w^T being w read as [OC, C].
inline ColMajorGemm matmul_dinp_gemm(void* dinp, const void* dout, const void* w, int64_t N, int C, int OC) {
  return {true, false, C, N, OC, w, OC, dout, OC, 0.0f, dinp, C};
}

// The input gradient of a product whose input was gelu(pre), pre [N, C]:
// dpre = (dout @ w^T) * gelu'(pre), the GELU's backward as the epilogue.
inline ColMajorGemm matmul_dpre_gelu_gemm(void* dpre, const void* pre, const void* dout, const void* w, int64_t N,
                                          int C, int OC) {
  ColMajorGemm g = matmul_dinp_gemm(dpre, dout, w, N, C, OC);
  g.epilogue = GemmEpilogue::kGeluGrad;
  g.aux = pre;
  g.aux_ld = C;
  return g;
}

// dw[C, OC] += inp^T @ dout: dw^T = dout^T inp.
inline ColMajorGemm matmul_dw_gemm(float* dw, const void* dout, const void* inp, int64_t N, int C, int OC) {
  return {false, true, OC, C, N, dout, OC, inp, C, 1.0f, dw, OC};
}

// The head's products over the vocabulary rows [v0, v1) of wte [V, C]:
// cuBLASLt runs them at its Hopper kernels' speed only where that
// dimension is a whole number of 16-byte vectors (measured on an H200:
// gpt2's head products took 27.4 ms a step with V = 50257, on sm75
// kernels, and 5.9 ms with V = 50304), so the CUDA table takes
// [0, V rounded down to 8) and the 1-7 rows left apart (vocab_head,
// vocab_tail).
// `ob`: bytes of an operand; the logits a slice writes are elements of
// `logits_bytes`.
struct VocabSlice {
  int64_t v0, v1;
};
inline VocabSlice vocab_head(int V) { return {0, V / 8 * 8}; }
inline VocabSlice vocab_tail(int V) { return {V / 8 * 8, V}; }

// logits[rows, v0:v1] (rows ld apart) = inp[rows, C] (rows inp_stride
// apart) @ wte[v0:v1, C]^T: logits^T = wte inp^T.
inline ColMajorGemm logits_gemm(void* logits, int64_t ld, int64_t logits_bytes, const void* inp, int64_t inp_stride,
                                const void* wte, int64_t ob, int64_t rows, int C, VocabSlice s) {
  return {true,  false, s.v1 - s.v0, rows, C, static_cast<const char*>(wte) + s.v0 * C * ob, C, inp, inp_stride, 0.0f,
          static_cast<char*>(logits) + s.v0 * logits_bytes, ld};
}

// dinp[rows, C] (+)= dlogits[rows, v0:v1] (rows ld apart) @ wte[v0:v1, C]:
// dinp^T = wte^T dlogits^T; the slice from 0 writes, a later one adds.
inline ColMajorGemm head_dinp_gemm(void* dinp, const void* dlogits, int64_t ld, const void* wte, int64_t ob,
                                   int64_t rows, int C, VocabSlice s) {
  return {false, false, C, rows, s.v1 - s.v0, static_cast<const char*>(wte) + s.v0 * C * ob, C,
          static_cast<const char*>(dlogits) + s.v0 * ob, ld, s.v0 == 0 ? 0.0f : 1.0f, dinp, C};
}

// dwte[v0:v1, C] += dlogits[rows, v0:v1]^T @ inp[rows, C]: dwte^T = inp^T
// dlogits.
inline ColMajorGemm head_dwte_gemm(float* dwte, const void* dlogits, int64_t ld, const void* inp, int64_t ob,
                                   int64_t rows, int C, VocabSlice s) {
  return {false, true, C, s.v1 - s.v0, rows, inp, C, static_cast<const char*>(dlogits) + s.v0 * ob, ld, 1.0f,
          dwte + s.v0 * C, C};
}

// LoRA's products (Kernels::lora_*) on the adapter's columns [c0, c0 +
// out) of a base product's output, rows ld apart, taken in place (ob:
// bytes of an operand); the scale is the product's alpha, a sum its beta.
// u[N, r] = scale (x[N, in] @ A[in, r]).
inline ColMajorGemm lora_down_gemm(void* u, const void* x, const void* a, int64_t N, int in, int r, float scale) {
  ColMajorGemm g = matmul_forward_gemm(u, x, a, nullptr, N, in, r);
  g.alpha = scale;
  return g;
}

// y[N, c0:c0+out] += u[N, r] @ B[r, out]: y^T = B^T u^T + y^T.
inline ColMajorGemm lora_up_gemm(void* y, int64_t ld, int64_t c0, int64_t ob, const void* u, const void* b, int64_t N,
                                 int r, int out) {
  return {false, false, out, N, r, b, out, u, r, 1.0f, static_cast<char*>(y) + c0 * ob, ld};
}

// du[N, r] = scale (dy[N, c0:c0+out] @ B^T): du^T = B dy^T.
inline ColMajorGemm lora_du_gemm(void* du, const void* dy, int64_t ld, int64_t c0, int64_t ob, const void* b,
                                 int64_t N, int r, int out, float scale) {
  ColMajorGemm g{true, false, r, N, out, b, out, static_cast<const char*>(dy) + c0 * ob, ld, 0.0f, du, r};
  g.alpha = scale;
  return g;
}

// dB[r, out] += u^T @ dy[N, c0:c0+out]: dB^T = dy^T u.
inline ColMajorGemm lora_db_gemm(float* db, const void* dy, int64_t ld, int64_t c0, int64_t ob, const void* u,
                                 int64_t N, int r, int out) {
  return {false, true, out, r, N, static_cast<const char*>(dy) + c0 * ob, ld, u, r, 1.0f, db, out};
}

// dx[N, in] += du[N, r] @ A^T: dx^T = A du^T + dx^T.
inline ColMajorGemm lora_dx_gemm(void* dx, const void* du, const void* a, int64_t N, int in, int r) {
  ColMajorGemm g = matmul_dinp_gemm(dx, du, a, N, in, r);
  g.beta = 1.0f;
  return g;
}

}  // namespace zerod::cuda
