// RMSNorm over rows of C, the Llama family's:
//   forward:  r = 1 / sqrt(mean(x^2) + eps), xhat = x r, y = xhat w; r kept a row.
//   backward: dnorm = dy w; dx += r (dnorm - xhat mean(dnorm xhat));
//             dw += sum over rows of dy xhat.
// Memory-bound: the forward reads x and w and writes y; the backward reads
// dy, x and w and adds to dx, and dw reads dy and x again in column chunks
// (rows.h).
//
// One body for both tables: the CPU's (rmsnorm.cc) runs a row on one lane
// in index order, the CUDA table's (rmsnorm.cuh) on a warp, 16 bytes a
// lane where rows are whole vectors (rows.h), the forward's row held in
// registers where a warp can hold it and fused with the residual add
// before it (one read of x and the branch, one write of their sum and of
// the normalized row).
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"
#include "runtime/kernels/ops/rows.h"

namespace zerod {
namespace cpu {

// RMSNorm: out = x / sqrt(mean(x²) + eps) * w per row of C; saves the
// reciprocal root. Backward: dinp += ..., dw += ... (dw null: frozen).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int C, float eps);
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int C);

}  // namespace cpu

namespace cuda {

// RMSNorm of a row x of C: r = 1 / sqrt(mean(x²) + eps), out = x r w.
// The sum of squares is rows.h's row_squares_about 0 (x - 0 is x).
ZD_HD float rmsnorm_rstd(float squares, int C, float eps) { return 1.0f / sqrtf(squares / C + eps); }
template <class O, class X, class W>
ZD_HD void rmsnorm_write(O o, X x, W w, int C, float r, int lane, int lanes) {
  for (int i = lane; i < C; i += lanes) o[i] = x[i] * r * w[i];
}

// Backward of a row: with dnorm = dy w and xhat = x r, the row's sum
// sum(dnorm xhat), then dx += (dnorm - xhat sum / C) r on each lane's
// columns.
template <class D, class X, class W>
ZD_HD float rmsnorm_backward_sum(D dy, X x, W w, float r, int C, int lane, int lanes) {
  float s = 0.0f;
  for (int i = lane; i < C; i += lanes) s += dy[i] * w[i] * (x[i] * r);
  return s;
}
template <class O, class D, class X, class W>
ZD_HD void rmsnorm_backward_write(O dx, D dy, X x, W w, float r, float sum, int C, int lane, int lanes) {
  const float mean = sum / C;
  for (int i = lane; i < C; i += lanes) dx[i] += (dy[i] * w[i] - x[i] * r * mean) * r;
}
// Stage 1 of dw (rows.h's column sums): partial[c * C + i] is column
// i's sum of dy xhat over chunk c's rows.
template <class D, class X>
ZD_HD void rmsnorm_weight_partial_at(int64_t j, float* partial, D dout, X inp, const float* rstd, int64_t N, int C,
                                     int64_t rows) {
  const int64_t c = j / C, i = j % C, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float g = 0.0f;
  for (int64_t n = c * rows; n < hi; ++n) g += dout[n * C + i] * (inp[n * C + i] * rstd[n]);
  partial[j] = g;
}

// 16 bytes a lane (rows.h's RowVectors): the forward's write after
// vec_row_squares_about(x, C, 0), the backward's sum and write; each lane's
// vectors in order.
template <DType kT>
ZD_HD void vec_rmsnorm_write(void* o, const void* x, const void* w, int C, float r, int lane, int lanes) {
  using V = RowVectors<kT>;
  float xv[V::W], wv[V::W], ov[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(x, i, xv);
    V::load(w, i, wv);
    for (int k = 0; k < V::W; ++k) ov[k] = xv[k] * r * wv[k];
    V::store(o, i, ov);
  }
}
// The same write of a row held in registers (rows.h's HeldRow, whose
// squares_about(0) is the sum): vec_rmsnorm_write's bits.
template <DType kT, int kHeld>
ZD_HD void held_rmsnorm_write(const HeldRow<kT, kHeld>& x, void* o, const void* w, float r) {
  using V = RowVectors<kT>;
  using L = typename V::L;
  ZD_UNROLL
  for (int j = 0; j < kHeld; ++j) {
    if (!x.has(j)) continue;
    float wv[V::W], ov[V::W];
    V::load(w, x.at(j), wv);
    for (int k = 0; k < V::W; ++k) ov[k] = L::get(x.v[j], k) * r * wv[k];
    V::store(o, x.at(j), ov);
  }
}
template <DType kT>
ZD_HD float vec_rmsnorm_backward_sum(const void* dy, const void* x, const void* w, float r, int C, int lane,
                                     int lanes) {
  using V = RowVectors<kT>;
  float s = 0.0f, dv[V::W], xv[V::W], wv[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(dy, i, dv);
    V::load(x, i, xv);
    V::load(w, i, wv);
    for (int k = 0; k < V::W; ++k) s += dv[k] * wv[k] * (xv[k] * r);
  }
  return s;
}
template <DType kT>
ZD_HD void vec_rmsnorm_backward_write(void* dx, const void* dy, const void* x, const void* w, float r, float sum, int C,
                                      int lane, int lanes) {
  using V = RowVectors<kT>;
  const float mean = sum / C;
  float gv[V::W], dv[V::W], xv[V::W], wv[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(dx, i, gv);
    V::load(dy, i, dv);
    V::load(x, i, xv);
    V::load(w, i, wv);
    for (int k = 0; k < V::W; ++k) gv[k] += (dv[k] * wv[k] - xv[k] * r * mean) * r;
    V::store(dx, i, gv);
  }
}

}  // namespace cuda
}  // namespace zerod
