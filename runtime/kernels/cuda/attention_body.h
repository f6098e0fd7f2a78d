// Causal self-attention one row at a time, keeping no T x T matrix: the
// forward saves each query row's softmax statistic lse = max + log(sum of
// exp), and the backward recomputes every probability p = exp(score - lse)
// from q, k and it (the flash-attention scheme). Rows are numbered
// r = (b * NH + h) * T + t; qkv is [B, T, 3C] (q, k, v blocks of C, heads
// side by side), out and dout [B, T, C].
//
// Backward in three passes over rows, each writing only its own row, so
// there are no atomics: D[r] = sum_s p_s (dy . v_s) per query row; then
// dq per query row and dk, dv per key row, with
//   dS = P (dP - D), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dY,
// the CPU kernel's math (cpu/attention.cc).
#pragma once

#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

struct AttnRow {
  int64_t b, h, t;
  int T, C, hs;
  float scale;
  const float* base;  // this sequence's qkv
};

ZD_HD AttnRow attn_row(int64_t r, const float* qkv, int T, int C, int NH) {
  AttnRow a;
  a.t = r % T;
  a.h = (r / T) % NH;
  a.b = r / (int64_t(T) * NH);
  a.T = T;
  a.C = C;
  a.hs = C / NH;
  a.scale = 1.0f / sqrtf(static_cast<float>(a.hs));
  a.base = qkv + a.b * T * 3 * int64_t(C);
  return a;
}

// Head h's q, k or v (part 0, 1, 2) at position t.
ZD_HD const float* attn_qkv(const AttnRow& a, int64_t t, int part) {
  return a.base + t * 3 * int64_t(a.C) + int64_t(part) * a.C + a.h * a.hs;
}
// Head h's slice of a [B, T, C] row (out, dout) at position t.
template <class T>
ZD_HD T* attn_btc(const AttnRow& a, T* x, int64_t t) {
  return x + (a.b * a.T + t) * a.C + a.h * a.hs;
}
// Head h's q, k or v slice of a [B, T, 3C] gradient at position t.
ZD_HD float* attn_dqkv(const AttnRow& a, float* dqkv, int64_t t, int part) {
  return dqkv + (a.b * a.T + t) * 3 * int64_t(a.C) + int64_t(part) * a.C + a.h * a.hs;
}

ZD_HD float attn_dot(const float* x, const float* y, int n) {
  float s = 0.0f;
  for (int d = 0; d < n; ++d) s += x[d] * y[d];
  return s;
}

// The scaled score of query position t and key position s.
ZD_HD float attn_score(const AttnRow& a, int64_t t, int64_t s) {
  return attn_dot(attn_qkv(a, t, 0), attn_qkv(a, s, 1), a.hs) * a.scale;
}

ZD_HD void attention_forward_row(int64_t r, float* out, float* lse, const float* qkv, int T, int C, int NH) {
  const AttnRow a = attn_row(r, qkv, T, C, NH);
  float mx = -INFINITY;
  for (int64_t s = 0; s <= a.t; ++s) {
    const float sc = attn_score(a, a.t, s);
    mx = sc > mx ? sc : mx;
  }
  float* o = attn_btc(a, out, a.t);
  for (int d = 0; d < a.hs; ++d) o[d] = 0.0f;
  float sum = 0.0f;
  for (int64_t s = 0; s <= a.t; ++s) {
    const float e = expf(attn_score(a, a.t, s) - mx);
    sum += e;
    const float* v = attn_qkv(a, s, 2);
    for (int d = 0; d < a.hs; ++d) o[d] += e * v[d];
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < a.hs; ++d) o[d] *= inv;
  lse[r] = mx + logf(sum);
}

// D[r] = sum over keys s <= t of p_s (dy . v_s), dy being the row's dout.
ZD_HD void attention_backward_d_row(int64_t r, float* D, const float* dout, const float* qkv, const float* lse, int T,
                                    int C, int NH) {
  const AttnRow a = attn_row(r, qkv, T, C, NH);
  const float* dy = attn_btc(a, dout, a.t);
  float sum = 0.0f;
  for (int64_t s = 0; s <= a.t; ++s) {
    sum += expf(attn_score(a, a.t, s) - lse[r]) * attn_dot(dy, attn_qkv(a, s, 2), a.hs);
  }
  D[r] = sum;
}

// dq of query row r: scale * sum over keys s <= t of p_s (dy . v_s - D) k_s.
ZD_HD void attention_backward_dq_row(int64_t r, float* dqkv, const float* dout, const float* qkv, const float* lse,
                                     const float* D, int T, int C, int NH) {
  const AttnRow a = attn_row(r, qkv, T, C, NH);
  const float* dy = attn_btc(a, dout, a.t);
  float* dq = attn_dqkv(a, dqkv, a.t, 0);
  for (int d = 0; d < a.hs; ++d) dq[d] = 0.0f;
  for (int64_t s = 0; s <= a.t; ++s) {
    const float p = expf(attn_score(a, a.t, s) - lse[r]);
    const float ds = p * (attn_dot(dy, attn_qkv(a, s, 2), a.hs) - D[r]);
    const float* k = attn_qkv(a, s, 1);
    for (int d = 0; d < a.hs; ++d) dq[d] += ds * k[d];
  }
  for (int d = 0; d < a.hs; ++d) dq[d] *= a.scale;
}

// dk and dv of key row r (key position t), over the query rows i >= t of
// its sequence and head: dv = sum p_i dy_i, dk = scale * sum p_i (dy_i . v - D_i) q_i.
ZD_HD void attention_backward_dkv_row(int64_t r, float* dqkv, const float* dout, const float* qkv, const float* lse,
                                      const float* D, int T, int C, int NH) {
  const AttnRow a = attn_row(r, qkv, T, C, NH);
  const float* v = attn_qkv(a, a.t, 2);
  float* dk = attn_dqkv(a, dqkv, a.t, 1);
  float* dv = attn_dqkv(a, dqkv, a.t, 2);
  for (int d = 0; d < a.hs; ++d) dk[d] = dv[d] = 0.0f;
  const int64_t row0 = r - a.t;  // row of query position 0
  for (int64_t i = a.t; i < T; ++i) {
    const float p = expf(attn_score(a, i, a.t) - lse[row0 + i]);
    const float* dy = attn_btc(a, dout, i);
    const float ds = p * (attn_dot(dy, v, a.hs) - D[row0 + i]);
    const float* q = attn_qkv(a, i, 0);
    for (int d = 0; d < a.hs; ++d) {
      dv[d] += p * dy[d];
      dk[d] += ds * q[d];
    }
  }
  for (int d = 0; d < a.hs; ++d) dk[d] *= a.scale;
}

}  // namespace zerod::cuda
