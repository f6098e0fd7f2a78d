// Per-row and per-column bodies of the layer kernels, each the CPU
// kernel's loop for one row or one column, in the CPU's order: LayerNorm
// (cpu/layernorm.cc), the embedding (cpu/embedding.cc), column sums of a
// bias gradient (cpu/matmul.cc), the softmax cross-entropy of one row of
// logits (cpu/cross_entropy.cc) and the chunked sum of squares
// (cpu/reduce.cc). A column body walks every row in order, so its sums
// are the CPU's, with no atomics: the same bits every run.
#pragma once

#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

ZD_HD void layernorm_forward_row(int64_t n, float* out, float* mean, float* rstd, const float* inp, const float* w,
                                 const float* b, int C) {
  const float* x = inp + n * C;
  float m = 0.0f;
  for (int i = 0; i < C; ++i) m += x[i];
  m /= C;
  float v = 0.0f;
  for (int i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
  v /= C;
  const float s = 1.0f / sqrtf(v + cpu::kLayerNormEps);
  float* o = out + n * C;
  for (int i = 0; i < C; ++i) o[i] = (x[i] - m) * s * w[i] + b[i];
  mean[n] = m;
  rstd[n] = s;
}

// dinp += ... for row n.
ZD_HD void layernorm_backward_row(int64_t n, float* dinp, const float* dout, const float* inp, const float* w,
                                  const float* mean, const float* rstd, int C) {
  const float* x = inp + n * C;
  const float* dy = dout + n * C;
  const float m = mean[n], s = rstd[n];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int i = 0; i < C; ++i) {
    const float dnorm = dy[i] * w[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * (x[i] - m) * s;
  }
  dnorm_mean /= C;
  dnorm_norm_mean /= C;
  float* dx = dinp + n * C;
  for (int i = 0; i < C; ++i) {
    const float norm = (x[i] - m) * s;
    dx[i] += (dy[i] * w[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// dw[i] += ..., db[i] += ... for column i, down all N rows.
ZD_HD void layernorm_backward_column(int i, float* dw, float* db, const float* dout, const float* inp,
                                     const float* mean, const float* rstd, int64_t N, int C) {
  float gw = dw[i], gb = db[i];
  for (int64_t n = 0; n < N; ++n) {
    const float dy = dout[n * C + i];
    gw += dy * (inp[n * C + i] - mean[n]) * rstd[n];
    gb += dy;
  }
  dw[i] = gw;
  db[i] = gb;
}

// Element j of the [B*T, C] output.
ZD_HD void embedding_forward_at(int64_t j, float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                int T, int C) {
  const int64_t row = j / C, i = j % C;
  const int t = static_cast<int>(row % T);
  assert(tokens[row] >= 0);
  out[j] = wte[int64_t(tokens[row]) * C + i] + wpe[int64_t(t) * C + i];
}

// Column i of dwte and dwpe, over every position in order.
ZD_HD void embedding_backward_column(int i, float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                     int64_t N, int T, int C) {
  for (int64_t row = 0; row < N; ++row) {
    const float d = dout[row * C + i];
    dwte[int64_t(tokens[row]) * C + i] += d;
    dwpe[(row % T) * C + i] += d;
  }
}

// dbias[o] += the column sum of dout [N, OC], down the rows.
ZD_HD void bias_backward_column(int o, float* dbias, const float* dout, int64_t N, int OC) {
  float g = dbias[o];
  for (int64_t n = 0; n < N; ++n) g += dout[n * OC + o];
  dbias[o] = g;
}

// One row of V logits: its loss -log p[target] and, when dloss != 0, the
// logits replaced by (softmax - onehot) * dloss.
ZD_HD void softmax_cross_entropy_row(int64_t r, float* logits, double* losses, const int32_t* targets, int V,
                                     float dloss) {
  float* z = logits + r * V;
  float mx = z[0];
  for (int i = 1; i < V; ++i) mx = z[i] > mx ? z[i] : mx;
  double sum = 0.0;
  for (int i = 0; i < V; ++i) sum += exp(static_cast<double>(z[i] - mx));
  const int tgt = targets[r];
  assert(tgt >= 0 && tgt < V);
  losses[r] = log(sum) - static_cast<double>(z[tgt] - mx);
  if (dloss == 0.0f) return;
  const double inv = 1.0 / sum;
  for (int i = 0; i < V; ++i) {
    const float p = static_cast<float>(exp(static_cast<double>(z[i] - mx)) * inv);
    z[i] = (p - (i == tgt ? 1.0f : 0.0f)) * dloss;
  }
}

// Chunk c of cpu::sum_squares's order.
ZD_HD double sum_squares_chunk(int64_t c, const float* x, int64_t n) {
  const int64_t lo = c * cpu::kSquaresChunk, hi = lo + cpu::kSquaresChunk < n ? lo + cpu::kSquaresChunk : n;
  double s = 0.0;
  for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace zerod::cuda
