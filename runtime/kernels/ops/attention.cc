// Attention on the CPU: query rows in blocks, their products through
// OpenBLAS (attention.h).
#include "runtime/kernels/ops/attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace zerod::cpu {
namespace {

// A block's [rows, T] scores at most: 16 MiB a matrix, so a sequence of up
// to 2048 is one block and its products are the whole T x T ones.
constexpr int64_t kBlockFloats = int64_t{1} << 22;

// One (document, query head): q, k and v at the document's first position
// (rows W = C + 2 KV hs apart; k and v the shared head's), the output or
// its gradient (rows C apart), and the row statistics [T, 2].
struct Head {
  const float *q, *k, *v;
  int64_t W, C;
  int hs;
  float scale;
};

Head head(const float* qkv, int64_t row0, int h, int C, int NH, int KV) {
  const int hs = C / NH, kv = h / (NH / KV);
  const int64_t W = C + 2 * int64_t(KV) * hs;
  const float* row = qkv + row0 * W;
  const float* k = row + C + int64_t(kv) * hs;
  return {row + int64_t(h) * hs, k, k + int64_t(KV) * hs, W, C, hs, 1.0f / std::sqrt(static_cast<float>(hs))};
}

// The documents of B sequences of T: each sequence whole where pos is
// null, else cut where a row's position is 0.
struct Document {
  int b, t0, T;  // sequence b's rows [t0, t0 + T)
};
std::vector<Document> documents(const int32_t* pos, int B, int T) {
  std::vector<Document> docs;
  for (int b = 0; b < B; ++b) {
    int t0 = 0;
    for (int t = 1; t <= T; ++t) {
      if (t < T && (!pos || pos[int64_t(b) * T + t] != 0)) continue;
      docs.push_back({b, t0, t - t0});
      t0 = t;
    }
  }
  return docs;
}

// S[rows, keys] = scale Q[r0, r0 + rows) K[0, keys)^T.
void scores(const Head& x, int r0, int rows, int keys, float* S) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, x.hs, x.scale, x.q + r0 * x.W, x.W, x.k, x.W, 0.0f,
              S, keys);
}

}  // namespace

int attention_block_rows(int T) { return static_cast<int>(std::clamp<int64_t>(kBlockFloats / T, 1, T)); }

int64_t attention_scratch_floats(int T, int threads) { return 2 * int64_t(threads) * attention_block_rows(T) * T; }
int64_t attention_scratch_floats(int T) { return attention_scratch_floats(T, omp_get_max_threads()); }

// Per (document, head), a block of query rows at a time: S = QK^T /
// sqrt(hs) over the keys the block's rows see, P = causal softmax(S),
// Y = PV; each as one single-threaded sgemm inside a parallel loop over
// the documents' heads. A document is computed as a sequence of its own.
void attention_forward(float* out, float* stats, float* scratch, const float* qkv, int B, int T, int C, int NH, int KV,
                       int block_rows, const int32_t* pos) {
  const std::vector<Document> docs = documents(pos, B, T);
  const int64_t n = int64_t(docs.size()) * NH;
  // Documents' costs differ (T^2 each): dynamic, which changes no bits.
#pragma omp parallel for schedule(dynamic)
  for (int64_t j = 0; j < n; ++j) {
    const Document& d = docs[j / NH];
    const int h = static_cast<int>(j % NH);
    const int64_t row0 = int64_t(d.b) * T + d.t0;
    const Head x = head(qkv, row0, h, C, NH, KV);
    float* S = scratch + 2 * int64_t(omp_get_thread_num()) * block_rows * T;
    float* st = stats + (int64_t(d.b) * NH + h) * 2 * T + 2 * d.t0;
    for (int r0 = 0; r0 < d.T; r0 += block_rows) {
      const int rows = std::min(block_rows, d.T - r0), keys = r0 + rows;
      scores(x, r0, rows, keys, S);
      for (int i = 0; i < rows; ++i) {
        const int t = r0 + i;
        float* row = S + int64_t(i) * keys;
        float mx = row[0];
        for (int s = 1; s <= t; ++s) mx = std::max(mx, row[s]);
        float sum = 0.0f;
        for (int s = 0; s <= t; ++s) {
          row[s] = std::exp(row[s] - mx);
          sum += row[s];
        }
        const float inv = 1.0f / sum;
        for (int s = 0; s <= t; ++s) row[s] *= inv;
        std::fill(row + t + 1, row + keys, 0.0f);
        st[2 * t] = mx;
        st[2 * t + 1] = inv;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, x.hs, keys, 1.0f, S, keys, x.v, x.W, 0.0f,
                  out + (row0 + r0) * C + int64_t(h) * x.hs, C);
    }
  }
}

void attention_forward(float* out, float* stats, float* scratch, const float* qkv, int B, int T, int C, int NH, int KV,
                       const int32_t* pos) {
  attention_forward(out, stats, scratch, qkv, B, T, C, NH, KV, attention_block_rows(T), pos);
}

// Per (document, key and value head), its query heads in order: a head's
// dK and dV add to the shared head's, as do a document's blocks of rows
// after the first.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* stats, float* scratch, int B,
                        int T, int C, int NH, int KV, DType rounded, int block_rows, const int32_t* pos) {
  const int group = NH / KV;
  const std::vector<Document> docs = documents(pos, B, T);
  const int64_t n = int64_t(docs.size()) * KV;
#pragma omp parallel for schedule(dynamic)
  for (int64_t j = 0; j < n; ++j) {
    const Document& d = docs[j / KV];
    const int kv = static_cast<int>(j % KV);
    const bool accumulate = block_rows < d.T || group > 1;
    const float beta = accumulate ? 1.0f : 0.0f;
    float* P = scratch + 2 * int64_t(omp_get_thread_num()) * block_rows * T;
    float* dS = P + int64_t(block_rows) * T;
    const int hs = C / NH;
    const int64_t W = C + 2 * int64_t(KV) * hs, row0 = int64_t(d.b) * T + d.t0;
    float* drow = dqkv + row0 * W;
    float* dk = drow + C + int64_t(kv) * hs;
    float* dv = dk + int64_t(KV) * hs;
    if (accumulate) {
      for (int t = 0; t < d.T; ++t) {
        std::fill_n(dk + t * W, hs, 0.0f);
        std::fill_n(dv + t * W, hs, 0.0f);
      }
    }
    for (int h = kv * group; h < (kv + 1) * group; ++h) {
      const Head x = head(qkv, row0, h, C, NH, KV);
      const float* st = stats + (int64_t(d.b) * NH + h) * 2 * T + 2 * d.t0;
      float* dq = drow + int64_t(h) * x.hs;
      const float* dy = dout + row0 * C + int64_t(h) * x.hs;
      for (int r0 = 0; r0 < d.T; r0 += block_rows) {
        const int rows = std::min(block_rows, d.T - r0), keys = r0 + rows;
        // P as the forward made it, at the values the activations keep.
        scores(x, r0, rows, keys, P);
        for (int i = 0; i < rows; ++i) {
          const int t = r0 + i;
          float* row = P + int64_t(i) * keys;
          const float mx = st[2 * t], inv = st[2 * t + 1];
          for (int s = 0; s <= t; ++s) row[s] = std::exp(row[s] - mx) * inv;
          if (rounded != DType::kF32) round_to(rounded, row, t + 1);
          std::fill(row + t + 1, row + keys, 0.0f);
        }
        // dP = dY V^T, dV = P^T dY.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, x.hs, 1.0f, dy + r0 * x.C, C, x.v, x.W, 0.0f,
                    dS, keys);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, x.hs, rows, 1.0f, P, keys, dy + r0 * x.C, C, beta,
                    dv, x.W);
        // Softmax backward: dS = P * (dP - sum(dP * P)); zero where P is masked.
        for (int i = 0; i < rows; ++i) {
          const int t = r0 + i;
          float* row = dS + int64_t(i) * keys;
          const float* prow = P + int64_t(i) * keys;
          float dot = 0.0f;
          for (int s = 0; s <= t; ++s) dot += row[s] * prow[s];
          for (int s = 0; s <= t; ++s) row[s] = prow[s] * (row[s] - dot);
          std::fill(row + t + 1, row + keys, 0.0f);
        }
        // dQ = dS K * scale, dK = dS^T Q * scale.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, x.hs, keys, x.scale, dS, keys, x.k, x.W, 0.0f,
                    dq + r0 * x.W, x.W);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, x.hs, rows, x.scale, dS, keys, x.q + r0 * x.W, x.W,
                    beta, dk, x.W);
      }
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* stats, float* scratch, int B,
                        int T, int C, int NH, int KV, DType rounded, const int32_t* pos) {
  attention_backward(dqkv, dout, qkv, stats, scratch, B, T, C, NH, KV, rounded, attention_block_rows(T), pos);
}

}  // namespace zerod::cpu
