// Per-row and per-column bodies of the layer kernels: LayerNorm
// (cpu/layernorm.cc), the embedding (cpu/embedding.cc), column sums of a
// bias gradient (cpu/matmul.cc), the softmax cross-entropy of one row of
// logits (cpu/cross_entropy.cc) and the lanes of the chunked sum of
// squares (cpu/reduce.cc).
//
// Column sums (the bias and LayerNorm parameter gradients) run in two
// stages so that every thread has work: one partial sum per chunk of
// rows and column, then each column's partials in chunk order. A row
// (LayerNorm's on a warp, a row of logits on a block) is shared by lanes,
// each taking every lanes-th column, their partials combined by the
// caller (shuffles on the GPU, a loop in tests/test_cuda_bodies.cc).
// Every order is fixed, with no atomics: the same bits every run.
#pragma once

#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

// LayerNorm of row x of C values, on lanes: the sum of x, then of
// (x - m)^2 about the mean m, then each lane writes its columns.
ZD_HD float row_sum(const float* x, int C, int lane, int lanes) {
  float sum = 0.0f;
  for (int i = lane; i < C; i += lanes) sum += x[i];
  return sum;
}
ZD_HD float row_squares_about(const float* x, int C, float m, int lane, int lanes) {
  float v = 0.0f;
  for (int i = lane; i < C; i += lanes) v += (x[i] - m) * (x[i] - m);
  return v;
}
ZD_HD float layernorm_rstd(float squares, int C) { return 1.0f / sqrtf(squares / C + cpu::kLayerNormEps); }
ZD_HD void layernorm_write(float* o, const float* x, const float* w, const float* b, int C, float m, float s, int lane,
                           int lanes) {
  for (int i = lane; i < C; i += lanes) o[i] = (x[i] - m) * s * w[i] + b[i];
}

// Backward of row n: the row's two sums, of dnorm = dy w and of
// dnorm (x - m) s (mean and rstd s from the forward), then
// dx += (dnorm - their means' terms) s on each lane's columns.
struct LayerNormRowSums {
  float dnorm, dnorm_norm;
};
ZD_HD LayerNormRowSums layernorm_backward_sums(const float* dy, const float* x, const float* w, float m, float s, int C,
                                               int lane, int lanes) {
  LayerNormRowSums r{0.0f, 0.0f};
  for (int i = lane; i < C; i += lanes) {
    const float dnorm = dy[i] * w[i];
    r.dnorm += dnorm;
    r.dnorm_norm += dnorm * (x[i] - m) * s;
  }
  return r;
}
ZD_HD void layernorm_backward_write(float* dx, const float* dy, const float* x, const float* w, float m, float s,
                                    LayerNormRowSums sums, int C, int lane, int lanes) {
  const float dnorm_mean = sums.dnorm / C, dnorm_norm_mean = sums.dnorm_norm / C;
  for (int i = lane; i < C; i += lanes) {
    const float norm = (x[i] - m) * s;
    dx[i] += (dy[i] * w[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// Stage 1 of dw and db: partial[c * 2C + i] and partial[c * 2C + C + i]
// are column i's sums over chunk c's rows.
ZD_HD void layernorm_params_partial_at(int64_t j, float* partial, const float* dout, const float* inp,
                                       const float* mean, const float* rstd, int64_t N, int C, int64_t rows) {
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

// Rows a chunk of a column sum takes: 64, or more where chunks x cols
// partials would not fit in kColumnPartials floats.
constexpr int64_t kColumnPartials = int64_t{1} << 22;
ZD_HD int64_t column_chunk_rows(int64_t N, int64_t cols) {
  int64_t rows = 64;
  while (rows < N && (N + rows - 1) / rows * cols > kColumnPartials) rows *= 2;
  return rows;
}

// Stage 1 of dbias: partial[c * OC + o] is dout's column o summed over
// chunk c's rows.
ZD_HD void bias_partial_at(int64_t j, float* partial, const float* dout, int64_t N, int OC, int64_t rows) {
  const int64_t c = j / OC, o = j % OC, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float g = 0.0f;
  for (int64_t n = c * rows; n < hi; ++n) g += dout[n * OC + o];
  partial[j] = g;
}

// Stage 2: d[o] += column o's partials (stride apart) in chunk order.
ZD_HD void column_total(int64_t o, float* d, const float* partial, int64_t chunks, int64_t stride) {
  float g = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) g += partial[c * stride + o];
  d[o] += g;
}

// One row z of V logits: its largest value, the sum of exp(z - mx) in
// double, its loss -log p[target] (from z[target] read before any lane
// writes), and the logits replaced by (softmax - onehot) * dloss.
ZD_HD float logits_row_max(const float* z, int V, int lane, int lanes) {
  float mx = -INFINITY;
  for (int i = lane; i < V; i += lanes) mx = z[i] > mx ? z[i] : mx;
  return mx;
}
ZD_HD double logits_row_sum(const float* z, int V, float mx, int lane, int lanes) {
  double sum = 0.0;
  for (int i = lane; i < V; i += lanes) sum += exp(static_cast<double>(z[i] - mx));
  return sum;
}
ZD_HD double cross_entropy_loss(float z_target, float mx, double sum) {
  return log(sum) - static_cast<double>(z_target - mx);
}
ZD_HD void softmax_grad_row(float* z, int V, int target, float mx, double sum, float dloss, int lane, int lanes) {
  const double inv = 1.0 / sum;
  for (int i = lane; i < V; i += lanes) {
    const float p = static_cast<float>(exp(static_cast<double>(z[i] - mx)) * inv);
    z[i] = (p - (i == target ? 1.0f : 0.0f)) * dloss;
  }
}

// cpu::sum_squares's order (cpu_kernels.h) on blocks of kSquaresLanes
// threads: lane `lane`'s sum of chunk c of x[0, n), then of the chunks'
// partials; each block's lanes then combine as a tree, one level at a time
// (reduce.cuh's block_tree_reduce on the GPU, a loop in tests).
ZD_HD double squares_lane(const float* x, int64_t n, int64_t c, int lane) {
  const int64_t lo = c * cpu::kSquaresChunk, hi = lo + cpu::kSquaresChunk < n ? lo + cpu::kSquaresChunk : n;
  double s = 0.0;
  for (int64_t i = lo + lane; i < hi; i += cpu::kSquaresLanes) s += static_cast<double>(x[i]) * x[i];
  return s;
}
ZD_HD double squares_partials_lane(const double* partial, int64_t chunks, int lane) {
  double s = 0.0;
  for (int64_t c = lane; c < chunks; c += cpu::kSquaresLanes) s += partial[c];
  return s;
}

}  // namespace zerod::cuda
