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
//
// Operands (X, W, O: hd.h's Operands or ConstOperands, or float pointers)
// are read and written as fp32 values; statistics and partial sums are fp32.
#pragma once

#include <initializer_list>

#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

// LayerNorm of row x of C values, on lanes: the sum of x, then of
// (x - m)^2 about the mean m, then each lane writes its columns.
template <class X>
ZD_HD float row_sum(X x, int C, int lane, int lanes) {
  float sum = 0.0f;
  for (int i = lane; i < C; i += lanes) sum += x[i];
  return sum;
}
template <class X>
ZD_HD float row_squares_about(X x, int C, float m, int lane, int lanes) {
  float v = 0.0f;
  for (int i = lane; i < C; i += lanes) {
    const float d = x[i] - m;
    v += d * d;
  }
  return v;
}
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

// LayerNorm 16 bytes a lane, for operands of type kT whose rows and
// parameters are whole vectors (rows_in_vectors): lane l takes the row's
// vectors l, l + lanes, ... A lane's sums run over its vectors in order,
// each vector's elements in order.
template <DType kT>
struct RowVectors {
  using L = Lanes16<kT>;
  static constexpr int W = L::kWidth;
  ZD_HD static void load(const void* p, int64_t v, float (&out)[W]) {
    const Bytes16 b = static_cast<const Bytes16*>(p)[v];
    for (int k = 0; k < W; ++k) out[k] = L::get(b, k);
  }
  ZD_HD static void store(void* p, int64_t v, const float (&in)[W]) {
    Bytes16 b{};
    for (int k = 0; k < W; ++k) L::set(b, k, in[k]);
    static_cast<Bytes16*>(p)[v] = b;
  }
};
// Whether rows of C operands at these pointers (row n at n C) are whole
// 16-byte vectors.
template <DType kT>
inline bool rows_in_vectors(int64_t C, std::initializer_list<const void*> ps) {
  if (C % RowVectors<kT>::W != 0) return false;
  for (const void* p : ps) {
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

template <DType kT>
ZD_HD float vec_row_sum(const void* x, int C, int lane, int lanes) {
  using V = RowVectors<kT>;
  float sum = 0.0f, v[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(x, i, v);
    for (int k = 0; k < V::W; ++k) sum += v[k];
  }
  return sum;
}
template <DType kT>
ZD_HD float vec_row_squares_about(const void* x, int C, float m, int lane, int lanes) {
  using V = RowVectors<kT>;
  float sum = 0.0f, v[V::W];
  for (int i = lane; i < C / V::W; i += lanes) {
    V::load(x, i, v);
    for (int k = 0; k < V::W; ++k) {
      const float d = v[k] - m;
      sum += d * d;
    }
  }
  return sum;
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

// Element j of the [B*T, C] output; wpe null: no positions.
template <class O, class W>
ZD_HD void embedding_forward_at(int64_t j, O out, const int32_t* tokens, W wte, W wpe, int T, int C) {
  const int64_t row = j / C, i = j % C;
  const int t = static_cast<int>(row % T);
  assert(tokens[row] >= 0);
  const float e = wte[int64_t(tokens[row]) * C + i];
  out[j] = wpe ? e + wpe[int64_t(t) * C + i] : e;
}

// The same 16 bytes a thread (rows of C whole vectors, every pointer
// 16-byte aligned): thread t takes vector t of the [B*T, C] output, each
// element the same fp32 sum rounded as the one-element path's.
template <DType kT>
ZD_HD void vec_embedding_forward_at(int64_t t, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                    int T, int C) {
  using V = RowVectors<kT>;
  const int vectors = C / V::W;
  const int64_t row = t / vectors;
  const int i = static_cast<int>(t % vectors);
  assert(tokens[row] >= 0);
  float e[V::W], p[V::W];
  V::load(wte, int64_t(tokens[row]) * vectors + i, e);
  if (wpe) {
    V::load(wpe, (row % T) * vectors + i, p);
    for (int k = 0; k < V::W; ++k) e[k] += p[k];
  }
  V::store(out, t, e);
}

// The embedding's backward in the CPU's order (each gradient element
// adds its positions in position order) without a thread walking every
// position: dwte a token at a time from `order` (the positions sorted by
// token, ties by position), the lanes of a block splitting the token's
// columns; dwpe an element at a time over the B sequences. Sorted index i
// starts a run unless its token is its predecessor's; the run's end is
// found sixteen positions at a time, their loads in flight together (a
// frequent token's run is thousands of positions in byte-level text, and
// a position at a time was two dependent loads each). A lane keeps four
// columns' sums and reads sixteen positions of each before it adds them,
// in order: the sixteen positions' rows first, then their 64 values, all
// in flight together (four positions, each row then its values, took
// 1.0 ms of a gpt2 step on byte-level text: two latencies every four
// positions of a long run).
template <class D>
ZD_HD void embedding_backward_run(int64_t i, int lane, int lanes, float* dwte, D dout, const int32_t* tokens,
                                  const int32_t* order, int64_t N, int C) {
  constexpr int kCols = 4, kAhead = 16, kScan = 16;
  const int32_t token = tokens[order[i]];
  if (i > 0 && tokens[order[i - 1]] == token) return;
  int64_t end = i + 1;
  for (bool more = true; more;) {
    int32_t next[kScan];
    for (int a = 0; a < kScan; ++a) next[a] = end + a < N ? tokens[order[end + a]] : -1;  // token ids are >= 0
    int same = 0;  // the leading positions of the token, without indexing next[] at run time (registers)
    bool run = true;
    for (int a = 0; a < kScan; ++a) {
      run = run && next[a] == token;
      same += run ? 1 : 0;
    }
    end += same;
    more = same == kScan;
  }
  float* row = dwte + int64_t(token) * C;
  for (int c0 = lane; c0 < C; c0 += kCols * lanes) {
    float g[kCols];
    bool in[kCols];
    for (int k = 0; k < kCols; ++k) {
      in[k] = c0 + k * lanes < C;
      g[k] = in[k] ? row[c0 + k * lanes] : 0.0f;
    }
    int64_t j = i;
    for (; j + kAhead <= end; j += kAhead) {
      int64_t at[kAhead];
      ZD_UNROLL
      for (int a = 0; a < kAhead; ++a) at[a] = int64_t(order[j + a]) * C + c0;
      float d[kAhead][kCols];
      ZD_UNROLL
      for (int a = 0; a < kAhead; ++a) {
        for (int k = 0; k < kCols; ++k) d[a][k] = in[k] ? static_cast<float>(dout[at[a] + k * lanes]) : 0.0f;
      }
      ZD_UNROLL
      for (int a = 0; a < kAhead; ++a) {
        for (int k = 0; k < kCols; ++k) g[k] += d[a][k];
      }
    }
    for (; j < end; ++j) {
      const int64_t at = int64_t(order[j]) * C + c0;
      for (int k = 0; k < kCols; ++k) {
        if (in[k]) g[k] += dout[at + k * lanes];
      }
    }
    for (int k = 0; k < kCols; ++k) {
      if (in[k]) row[c0 + k * lanes] = g[k];
    }
  }
}
template <class D>
ZD_HD void embedding_backward_position_at(int64_t j, float* dwpe, D dout, int B, int T, int C) {
  float g = dwpe[j];
  for (int b = 0; b < B; ++b) g += dout[int64_t(b) * T * C + j];
  dwpe[j] = g;
}

// Rows a chunk of a column sum takes: 16, so that stage 1 has threads
// enough to keep HBM busy (gpt2's bias partials, 64 rows a thread, had 186
// threads an SM of an H200 and ran at a third of its bandwidth), or more
// where chunks x cols partials would not fit in kColumnPartials floats.
constexpr int64_t kColumnPartials = int64_t{1} << 22;
ZD_HD int64_t column_chunk_rows(int64_t N, int64_t cols) {
  int64_t rows = 16;
  while (rows < N && (N + rows - 1) / rows * cols > kColumnPartials) rows *= 2;
  return rows;
}

// Stage 1 of dbias: partial[c * OC + o] is dout's column o summed over
// chunk c's rows.
template <class D>
ZD_HD void bias_partial_at(int64_t j, float* partial, D dout, int64_t N, int OC, int64_t rows) {
  const int64_t c = j / OC, o = j % OC, hi = (c + 1) * rows < N ? (c + 1) * rows : N;
  float g = 0.0f;
  for (int64_t n = c * rows; n < hi; ++n) g += dout[n * OC + o];
  partial[j] = g;
}

// Stage 2, a warp a column: lane l's share of column o's partials (stride
// apart), chunks l, l + lanes, ... in order. The lanes' shares, summed in
// the warp's fixed order, are the column's total, which one lane adds to
// the gradient. (A thread a column walked all the chunks: 42 us a launch.)
ZD_HD float column_share(int64_t o, int lane, int lanes, const float* partial, int64_t chunks, int64_t stride) {
  float g = 0.0f;
  for (int64_t c = lane; c < chunks; c += lanes) g += partial[c * stride + o];
  return g;
}

// One row z of V logits (operands) in fp32 registers: each lane's largest
// value and sum of exp(z - that) in one pass over its columns (online, as
// FlashAttention keeps its statistics), combined across the row as the
// row's max M and sum S of exp(z - M); the loss -log p[target] from
// z[target] read before any lane writes; then the logits replaced by
// (softmax - onehot) * dloss.
struct SoftmaxPart {
  float max, sum;
};
// A logit of -inf (an fp16 overflow) adds nothing, even to a lane that
// has seen only such.
ZD_HD void softmax_add(SoftmaxPart& p, float x) {
  if (x > p.max) {
    p.sum = p.sum * expf(p.max - x) + 1.0f;
    p.max = x;
  } else if (p.max != -INFINITY) {
    p.sum += expf(x - p.max);
  }
}
// A lane's part of S once the row's max M is known (0 for a lane without
// columns).
ZD_HD float softmax_part_sum(SoftmaxPart p, float M) { return p.sum == 0.0f ? 0.0f : p.sum * expf(p.max - M); }
ZD_HD double softmax_loss(float z_target, float M, float S) { return static_cast<double>(logf(S) - (z_target - M)); }
// Lanes read and write a row z of operands of type kT 16 bytes at a time
// (z 16-byte aligned): the row's whole vectors (lane l taking vectors l,
// l + lanes, ...), then its last V mod W elements one a lane. The first
// pass loads four of a lane's vectors before it adds any (four 16-byte
// loads in flight a lane) and, where `copy` is not null (the block's
// shared memory, V / W vectors), keeps each at its index there; the
// second reads them back from `from` (copy, or z itself) and writes the
// gradient into z: HBM then sees the row read once. Each lane reads back
// only what it stored.
template <DType kT>
ZD_HD SoftmaxPart vec_logits_row_part(const void* z, int V, int lane, int lanes, void* copy) {
  using R = RowVectors<kT>;
  constexpr int kBatch = 4;
  SoftmaxPart p{-INFINITY, 0.0f};
  const int vectors = V / R::W;
  for (int i0 = lane; i0 < vectors; i0 += kBatch * lanes) {
    Bytes16 b[kBatch];
    for (int a = 0; a < kBatch; ++a) {
      const int i = i0 + a * lanes;
      if (i < vectors) b[a] = static_cast<const Bytes16*>(z)[i];
    }
    for (int a = 0; a < kBatch; ++a) {
      const int i = i0 + a * lanes;
      if (i >= vectors) break;
      if (copy) static_cast<Bytes16*>(copy)[i] = b[a];
      for (int k = 0; k < R::W; ++k) softmax_add(p, R::L::get(b[a], k));
    }
  }
  for (int i = vectors * R::W + lane; i < V; i += lanes) softmax_add(p, load_f32(z, kT, i));
  return p;
}
template <DType kT>
ZD_HD void vec_softmax_grad_write(void* z, const void* from, int V, int target, float M, float S, float dloss,
                                  int lane, int lanes) {
  using R = RowVectors<kT>;
  const float inv = 1.0f / S;
  float v[R::W];
  for (int i = lane; i < V / R::W; i += lanes) {
    R::load(from, i, v);
    for (int k = 0; k < R::W; ++k) {
      const int col = i * R::W + k;
      v[k] = (expf(v[k] - M) * inv - (col == target ? 1.0f : 0.0f)) * dloss;
    }
    R::store(z, i, v);
  }
  for (int i = V / R::W * R::W + lane; i < V; i += lanes) {
    const float p = expf(load_f32(z, kT, i) - M) * inv;
    store_f32(z, kT, i, (p - (i == target ? 1.0f : 0.0f)) * dloss);
  }
}
// Bytes of shared memory a row's whole vectors take (what `copy` holds).
template <DType kT>
ZD_HD int64_t softmax_copy_bytes(int V) {
  return int64_t(V / RowVectors<kT>::W) * 16;
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
// Lane `lane`'s share of x[0, n) (the chunks' partials, or any doubles to
// sum in cpu::sum_in_lanes's order).
ZD_HD double lane_share(const double* x, int64_t n, int lane) {
  double s = 0.0;
  for (int64_t i = lane; i < n; i += cpu::kSquaresLanes) s += x[i];
  return s;
}

// Sums of squares of up to kSquaresGroup tensors in two launches (a
// rank's gradients, unit by unit: gpt2's 28 launches become 2), carried by
// value as the kernels' parameter: the tensors' chunks numbered tensor
// after tensor, tensor j's from start[j]; an empty tensor has none, and
// its sum is 0. Each tensor's sum is sum_squares's alone, bit for bit.
inline constexpr int kSquaresGroup = 96;
struct SquaresGroup {
  int count = 0;
  int64_t start[kSquaresGroup + 1] = {};  // start[count]: the launch's chunks
  cpu::SquaresOf t[kSquaresGroup];
};
// Lane `lane`'s part of chunk `chunk` of the group, and of tensor j's
// total over its chunks' partials (partial[c] for the group's chunk c).
ZD_HD double squares_group_lane(const SquaresGroup& g, int64_t chunk, int lane) {
  const int j = group_member(g, chunk);
  return squares_lane(g.t[j].x, g.t[j].n, chunk - g.start[j], lane);
}
ZD_HD double squares_total_lane(const SquaresGroup& g, const double* partial, int j, int lane) {
  return lane_share(partial + g.start[j], g.start[j + 1] - g.start[j], lane);
}
// The tensors in groups of up to kSquaresGroup whose chunks fit
// `max_chunks` partials (each tensor's alone must), in order.
template <class Launch>
void for_squares_groups(const cpu::SquaresOf* ts, size_t n, int64_t max_chunks, Launch launch) {
  SquaresGroup g{};
  for (size_t i = 0; i < n; ++i) {
    const int64_t chunks = cpu::squares_chunks(ts[i].n);
    if (g.count == kSquaresGroup || (g.count > 0 && g.start[g.count] + chunks > max_chunks)) {
      launch(g);
      g = {};
    }
    g.t[g.count] = ts[i];
    g.start[g.count + 1] = g.start[g.count] + chunks;
    ++g.count;
  }
  if (g.count > 0) launch(g);
}

}  // namespace zerod::cuda
