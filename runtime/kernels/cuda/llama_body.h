// Bodies of the Llama family's kernels, which the CPU's table runs as its
// own (one lane a row, in index order) and the CUDA table over its grid:
// RMSNorm, SwiGLU, and the rotary embedding of q and k with the key/value
// heads repeated for grouped-query attention. Operands (X, W, O, D: hd.h's
// Operands or ConstOperands, or float pointers) are read and written as
// fp32 values; statistics and partial sums are fp32.
#pragma once

#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

// RMSNorm of a row x of C: r = 1 / sqrt(mean(x²) + eps), out = x r w.
// The sum of squares is rows_body.h's row_squares_about 0 (x - 0 is x).
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
// Stage 1 of dw (rows_body.h's column sums): partial[c * C + i] is column
// i's sum of dy xhat over chunk c's rows.
template <class D, class X>
ZD_HD void rmsnorm_weight_partial_at(int64_t j, float* partial, D dout, X inp, const float* rstd, int64_t N, int C,
                                     int64_t rows) {
  const int64_t c = j / C, i = j % C, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float g = 0.0f;
  for (int64_t n = c * rows; n < hi; ++n) g += dout[n * C + i] * (inp[n * C + i] * rstd[n]);
  partial[j] = g;
}

// SwiGLU of a row of [gate | up], 2F wide: out[i] = silu(gate[i]) up[i],
// silu(g) = g sigmoid(g). Element j of the [N, F] output; the backward
// writes both of its inputs' gradients.
ZD_HD float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }
template <class O, class X>
ZD_HD void swiglu_at(int64_t j, O out, X inp, int F) {
  const int64_t n = j / F, i = j % F;
  const float g = inp[n * 2 * F + i], u = inp[n * 2 * F + F + i];
  out[j] = g * sigmoid(g) * u;
}
template <class O, class X, class D>
ZD_HD void swiglu_backward_at(int64_t j, O dinp, X inp, D dout, int F) {
  const int64_t n = j / F, i = j % F;
  const float g = inp[n * 2 * F + i], u = inp[n * 2 * F + F + i], dy = dout[j];
  const float sg = sigmoid(g);
  dinp[n * 2 * F + i] = dy * u * sg * (1.0f + g * (1.0f - sg));
  dinp[n * 2 * F + F + i] = dy * g * sg;
}

// The attention's input from a row of q (NH heads), k and v (KV heads
// each) of hd: q and k turned by their position's angles, every key and
// value head repeated for the NH / KV query heads that share it; a row of
// [q | k | v], NH heads each, as the attention kernels take.
struct RopeShape {
  int T, NH, KV, hd;
  ZD_HD int64_t width() const { return int64_t(NH + 2 * KV) * hd; }  // a row of the input
  ZD_HD int64_t C() const { return int64_t(NH) * hd; }
};
// Element d of a head x turned by angles `cs` (cos, sin pairs): d < hd/2
// turns with d + hd/2; sign -1 turns back (the transpose, for backward).
template <class X>
ZD_HD float rope_turn(X x, const float* cs, int d, int hd, float sign) {
  const int half = hd / 2, i = d < half ? d : d - half;
  const float c = cs[2 * i], s = sign * cs[2 * i + 1];
  return d < half ? x[d] * c - x[d + half] * s : x[d] * c + x[d - half] * s;
}
// Element j of the [N, 3C] output; `table` is [T, hd/2, 2].
template <class O, class X>
ZD_HD void rope_forward_at(int64_t j, O out, X qkv, const float* table, const RopeShape& s) {
  const int64_t C = s.C(), n = j / (3 * C), c = j % (3 * C);
  const int part = static_cast<int>(c / C), h = static_cast<int>(c % C / s.hd), d = static_cast<int>(c % s.hd);
  const int kv = h / (s.NH / s.KV);
  const int64_t src = part == 0 ? int64_t(h) * s.hd : C + (part - 1) * int64_t(s.KV) * s.hd + int64_t(kv) * s.hd;
  const X head = qkv + (n * s.width() + src);
  if (part == 2) {
    out[j] = head[d];
  } else {
    out[j] = rope_turn(head, table + (n % s.T) * s.hd, d, s.hd, 1.0f);
  }
}
// Element j of the [N, width] gradient of the compact q, k and v: q turned
// back, k and v the sums over their query heads, in head order.
template <class O, class D>
ZD_HD void rope_backward_at(int64_t j, O dqkv, D dout, const float* table, const RopeShape& s) {
  const int64_t C = s.C(), n = j / s.width(), c = j % s.width();
  const int d = static_cast<int>(c % s.hd);
  const float* cs = table + (n % s.T) * s.hd;
  const D row = dout + n * 3 * C;
  if (c < C) {
    dqkv[j] = rope_turn(row + (c - d), cs, d, s.hd, -1.0f);
    return;
  }
  const int part = c < C + int64_t(s.KV) * s.hd ? 1 : 2;
  const int kv = static_cast<int>((c - C - (part - 1) * int64_t(s.KV) * s.hd) / s.hd), group = s.NH / s.KV;
  float g = 0.0f;
  for (int h = kv * group; h < (kv + 1) * group; ++h) {
    const D head = row + (part * C + int64_t(h) * s.hd);
    g += part == 2 ? static_cast<float>(head[d]) : rope_turn(head, cs, d, s.hd, -1.0f);
  }
  dqkv[j] = g;
}

}  // namespace zerod::cuda
