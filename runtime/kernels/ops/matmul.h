// A layer's product, weights stored [in, out] (Hugging Face's GPT-2 Conv1D):
//   forward:  y[N, OC] = x[N, C] @ w[C, OC] + bias
//   backward: dx = dy @ w^T (overwritten); dw += x^T @ dy; dbias += column sums of dy
// Bound by the tensor cores (or the CPU's FMA units) at the sizes that
// matter: 2 N C OC multiply-adds a product, three products a layer's
// forward and backward. The products run in the libraries (OpenBLAS on the
// CPU, cpu/gemm.h; cuBLASLt on the GPU, cuda/lt_gemm.h, with the bias and
// GELU in its epilogues); the bias gradient is our own column sum (rows.h),
// added to the fp32 gradient in a fixed order.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"
#include "runtime/kernels/ops/rows.h"

namespace zerod {
namespace cpu {

// out[N,OC] = inp[N,C] @ w[C,OC] + bias[OC]; bias may be null. Weights are
// stored [in, out], as Hugging Face's GPT-2 Conv1D does.
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int C, int OC);
// dinp = dout @ w^T (overwritten), dw += inp^T @ dout, dbias += column sums
// of dout; each skipped when null (dw: a frozen weight).
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int C, int OC);

}  // namespace cpu

namespace cuda {

// Stage 1 of dbias: partial[c * OC + o] is dout's column o summed over
// chunk c's rows.
template <class D>
ZD_HD void bias_partial_at(int64_t j, float* partial, D dout, int64_t N, int OC, int64_t rows) {
  const int64_t c = j / OC, o = j % OC, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float g = 0.0f;
  for (int64_t n = c * rows; n < hi; ++n) g += dout[n * OC + o];
  partial[j] = g;
}

// bias_partial_at, W columns a thread: the same bits.
template <DType kT>
ZD_HD void vec_bias_partial_at(int64_t j, float* partial, const void* dout, int64_t N, int OC, int64_t rows) {
  using V = RowVectors<kT>;
  const int64_t vectors = OC / V::W, c = j / vectors, i = j % vectors, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float g[V::W] = {}, dv[V::W];
  for (int64_t n = c * rows; n < hi; ++n) {
    V::load(dout, n * vectors + i, dv);
    for (int k = 0; k < V::W; ++k) g[k] += dv[k];
  }
  for (int k = 0; k < V::W; ++k) partial[c * OC + i * V::W + k] = g[k];
}

}  // namespace cuda
}  // namespace zerod
