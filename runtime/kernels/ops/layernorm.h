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
// A row of out = a + b, lane l taking vectors l, l + lanes, ... as the
// LayerNorm bodies above read a row: a lane that then normalizes out reads
// back only its own stores (its program order, no barrier). Each sum is
// rounded as map_at's SumOf rounds it.
template <DType kT>
ZD_HD void vec_residual_row(void* out, const void* a, const void* b, int C, int lane, int lanes) {
  using V = RowVectors<kT>;
  float av[V::W], bv[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(a, i, av);
    V::load(b, i, bv);
    for (int k = 0; k < V::W; ++k) av[k] += bv[k];
    V::store(out, i, av);
  }
}
// A lane's share of a row on `lanes` lanes held in registers as loaded,
// 16 bytes a vector: vectors lane, lane + lanes, ..., at most kHeld of
// them. LayerNorm's forward then reads its row from memory once, a lane's
// loads all in flight before its first sum (three passes over the row
// took 0.57 of HBM's bandwidth on an H200; load_sum keeps eight in
// flight). Its sums and its write are
// vec_row_sum's, vec_row_squares_about's and vec_layernorm_write's over
// the same vectors in the same order: the same bits.
template <DType kT, int kHeld>
struct HeldRow {
  using V = RowVectors<kT>;
  using L = typename V::L;
  Bytes16 v[kHeld];
  int vectors, lane, lanes;

  ZD_HD HeldRow(int C, int lane, int lanes) : vectors(C / V::W), lane(lane), lanes(lanes) {}
  ZD_HD bool has(int j) const { return lane + j * lanes < vectors; }
  ZD_HD int at(int j) const { return lane + j * lanes; }
  ZD_HD void load(const void* x) {
    ZD_UNROLL
    for (int j = 0; j < kHeld; ++j) {
      if (has(j)) v[j] = static_cast<const Bytes16*>(x)[at(j)];
    }
  }
  // The row a + b, written to out and held: vec_residual_row's sums,
  // rounded as it rounds them. out may be a (a lane writes only the
  // vectors it read), so no load may follow a store the compiler cannot
  // tell apart from it: four vectors of a and of b are loaded, then
  // their sums stored, eight loads in flight where one pair was.
  ZD_HD void load_sum(void* out, const void* a, const void* b) {
    constexpr int kBatch = kHeld < 4 ? kHeld : 4;
    static_assert(kHeld % kBatch == 0);
    ZD_UNROLL
    for (int j0 = 0; j0 < kHeld; j0 += kBatch) {
      Bytes16 bv[kBatch];
      ZD_UNROLL
      for (int j = j0; j < j0 + kBatch; ++j) {
        if (!has(j)) continue;
        v[j] = static_cast<const Bytes16*>(a)[at(j)];
        bv[j - j0] = static_cast<const Bytes16*>(b)[at(j)];
      }
      ZD_UNROLL
      for (int j = j0; j < j0 + kBatch; ++j) {
        if (!has(j)) continue;
        Bytes16 s{};
        for (int k = 0; k < V::W; ++k) L::set(s, k, L::get(v[j], k) + L::get(bv[j - j0], k));
        v[j] = s;
        static_cast<Bytes16*>(out)[at(j)] = s;
      }
    }
  }
  ZD_HD float sum() const {
    float sum = 0.0f;
    ZD_UNROLL
    for (int j = 0; j < kHeld; ++j) {
      if (!has(j)) continue;
      for (int k = 0; k < V::W; ++k) sum += L::get(v[j], k);
    }
    return sum;
  }
  ZD_HD float squares_about(float m) const {
    float sum = 0.0f;
    ZD_UNROLL
    for (int j = 0; j < kHeld; ++j) {
      if (!has(j)) continue;
      for (int k = 0; k < V::W; ++k) {
        const float d = L::get(v[j], k) - m;
        sum += d * d;
      }
    }
    return sum;
  }
  ZD_HD void layernorm_write(void* o, const void* w, const void* b, float m, float s) const {
    ZD_UNROLL
    for (int j = 0; j < kHeld; ++j) {
      if (!has(j)) continue;
      float wv[V::W], bv[V::W], ov[V::W];
      V::load(w, at(j), wv);
      V::load(b, at(j), bv);
      for (int k = 0; k < V::W; ++k) ov[k] = (L::get(v[j], k) - m) * s * wv[k] + bv[k];
      V::store(o, at(j), ov);
    }
  }
};
// The fewest vectors a lane holds (4, 8 or 16) for a row of C operands on
// `lanes` lanes, or 0 where a row is longer than 16 a lane (over 4096 bf16
// or 2048 fp32 on a warp): those are read from memory again.
template <DType kT>
ZD_HD int held_vectors(int C, int lanes) {
  const int per_lane = (C / RowVectors<kT>::W + lanes - 1) / lanes;
  return per_lane <= 4 ? 4 : per_lane <= 8 ? 8 : per_lane <= 16 ? 16 : 0;
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
