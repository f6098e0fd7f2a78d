// LayerNorm over rows of C, GPT-2's:
//   forward:  m = mean(x), s = 1 / sqrt(mean((x - m)^2) + eps), xhat = (x - m) s,
//             y = xhat w + b; m and s kept a row for the backward.
//   backward: dnorm = dy w; dx += s (dnorm - mean(dnorm) - xhat mean(dnorm xhat));
//             dw += sum over rows of dy xhat; db += sum over rows of dy.
// Memory-bound: the forward reads x, w and b and writes y (and, fused
// with the residual add before it, reads a and b and writes their sum
// too); the backward reads dy, x and w and adds to dx, and its parameter
// gradients read dy and x again in column chunks (rows.h).
//
// The CPU's (layernorm.cc, a row a thread, each sum in index order) is the
// reference; the CUDA bodies below run a row on a warp (element by element,
// or 16 bytes a lane where rows are whole vectors), their launches in
// layernorm.cuh. tests/test_cuda_bodies.cc runs the bodies on the CPU.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"
#include "runtime/kernels/ops/rows.h"

namespace zerod {
namespace cpu {

inline constexpr float kLayerNormEps = 1e-5f;
// out = (x - mean) / sqrt(var + eps) * w + b per row of C; saves mean and rstd.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int C);
// dinp += ..., dw += ..., db += ... (dw and db both null for a frozen LayerNorm).
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int C);

}  // namespace cpu

namespace cuda {

// A row's forward on lanes: rows.h's row_sum and row_squares_about, then
// each lane writes its columns.
ZD_HD float layernorm_rstd(float squares, int C) { return 1.0f / sqrtf(squares / C + cpu::kLayerNormEps); }
template <class O, class X, class W>
ZD_HD void layernorm_write(O o, X x, W w, W b, int C, float m, float s, int lane, int lanes) {
  for (int i = lane; i < C; i += lanes) o[i] = (x[i] - m) * s * w[i] + b[i];
}

// Backward of row n: the row's two sums, of dnorm = dy w and of
// dnorm (x - m) s (mean and rstd s from the forward), then
// dx += (dnorm - their means' terms) s on each lane's columns.
struct LayerNormRowSums {
  float dnorm, dnorm_norm;
};
template <class D, class X, class W>
ZD_HD LayerNormRowSums layernorm_backward_sums(D dy, X x, W w, float m, float s, int C, int lane, int lanes) {
  LayerNormRowSums r{0.0f, 0.0f};
  for (int i = lane; i < C; i += lanes) {
    const float dnorm = dy[i] * w[i];
    r.dnorm += dnorm;
    r.dnorm_norm += dnorm * (x[i] - m) * s;
  }
  return r;
}
template <class O, class D, class X, class W>
ZD_HD void layernorm_backward_write(O dx, D dy, X x, W w, float m, float s, LayerNormRowSums sums, int C, int lane,
                                    int lanes) {
  const float dnorm_mean = sums.dnorm / C, dnorm_norm_mean = sums.dnorm_norm / C;
  for (int i = lane; i < C; i += lanes) {
    const float norm = (x[i] - m) * s;
    dx[i] += (dy[i] * w[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// Stage 1 of dw and db: partial[c * 2C + i] and partial[c * 2C + C + i]
// are column i's sums over chunk c's rows.
template <class D, class X>
ZD_HD void layernorm_params_partial_at(int64_t j, float* partial, D dout, X inp, const float* mean, const float* rstd,
                                       int64_t N, int C, int64_t rows) {
  const int64_t c = j / C, i = j % C, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float gw = 0.0f, gb = 0.0f;
  for (int64_t n = c * rows; n < hi; ++n) {
    const float dy = dout[n * C + i];
    gw += dy * (inp[n * C + i] - mean[n]) * rstd[n];
    gb += dy;
  }
  partial[c * 2 * C + i] = gw;
  partial[c * 2 * C + C + i] = gb;
}

template <DType kT>
ZD_HD void vec_layernorm_write(void* o, const void* x, const void* w, const void* b, int C, float m, float s, int lane,
                               int lanes) {
  using V = RowVectors<kT>;
  float xv[V::W], wv[V::W], bv[V::W], ov[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(x, i, xv);
    V::load(w, i, wv);
    V::load(b, i, bv);
    for (int k = 0; k < V::W; ++k) ov[k] = (xv[k] - m) * s * wv[k] + bv[k];
    V::store(o, i, ov);
  }
}
// LayerNorm's write of a row held in registers (rows.h's HeldRow):
// vec_layernorm_write's over the same vectors.
template <DType kT, int kHeld>
ZD_HD void held_layernorm_write(const HeldRow<kT, kHeld>& x, void* o, const void* w, const void* b, float m, float s) {
  using V = RowVectors<kT>;
  using L = typename V::L;
  ZD_UNROLL
  for (int j = 0; j < kHeld; ++j) {
    if (!x.has(j)) continue;
    float wv[V::W], bv[V::W], ov[V::W];
    V::load(w, x.at(j), wv);
    V::load(b, x.at(j), bv);
    for (int k = 0; k < V::W; ++k) ov[k] = (L::get(x.v[j], k) - m) * s * wv[k] + bv[k];
    V::store(o, x.at(j), ov);
  }
}

template <DType kT>
ZD_HD LayerNormRowSums vec_layernorm_backward_sums(const void* dy, const void* x, const void* w, float m, float s,
                                                   int C, int lane, int lanes) {
  using V = RowVectors<kT>;
  LayerNormRowSums r{0.0f, 0.0f};
  float dv[V::W], xv[V::W], wv[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(dy, i, dv);
    V::load(x, i, xv);
    V::load(w, i, wv);
    for (int k = 0; k < V::W; ++k) {
      const float dnorm = dv[k] * wv[k];
      r.dnorm += dnorm;
      r.dnorm_norm += dnorm * (xv[k] - m) * s;
    }
  }
  return r;
}
template <DType kT>
ZD_HD void vec_layernorm_backward_write(void* dx, const void* dy, const void* x, const void* w, float m, float s,
                                        LayerNormRowSums sums, int C, int lane, int lanes) {
  using V = RowVectors<kT>;
  const float dnorm_mean = sums.dnorm / C, dnorm_norm_mean = sums.dnorm_norm / C;
  float gv[V::W], dv[V::W], xv[V::W], wv[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(dx, i, gv);
    V::load(dy, i, dv);
    V::load(x, i, xv);
    V::load(w, i, wv);
    for (int k = 0; k < V::W; ++k) {
      const float norm = (xv[k] - m) * s;
      gv[k] += (dv[k] * wv[k] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
    V::store(dx, i, gv);
  }
}
// Stage 1 of dw and db, W columns a thread: layernorm_params_partial_at's
// sums (each column's rows in order, so the same bits) for thread j's
// chunk c = j / (C / W) and columns [(j % (C / W)) W, + W).
template <DType kT>
ZD_HD void vec_layernorm_params_partial_at(int64_t j, float* partial, const void* dout, const void* inp,
                                           const float* mean, const float* rstd, int64_t N, int C, int64_t rows) {
  using V = RowVectors<kT>;
  const int64_t vectors = C / V::W, c = j / vectors, i = j % vectors, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float gw[V::W] = {}, gb[V::W] = {}, dv[V::W], xv[V::W];
  for (int64_t n = c * rows; n < hi; ++n) {
    V::load(dout, n * vectors + i, dv);
    V::load(inp, n * vectors + i, xv);
    for (int k = 0; k < V::W; ++k) {
      gw[k] += dv[k] * (xv[k] - mean[n]) * rstd[n];
      gb[k] += dv[k];
    }
  }
  for (int k = 0; k < V::W; ++k) {
    partial[c * 2 * C + i * V::W + k] = gw[k];
    partial[c * 2 * C + C + i * V::W + k] = gb[k];
  }
}

}  // namespace cuda
}  // namespace zerod
