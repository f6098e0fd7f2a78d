// What the row and column kernels share (LayerNorm, RMSNorm, the
// embedding, a product's bias gradient, the logits' rows): a row's sums on
// lanes, element by element or 16 bytes a lane, and column sums in two
// stages.
//
// A row is shared by lanes, each taking every lanes-th column (or
// vector), their partials combined by the caller (shuffles on the GPU, a
// loop in tests/test_cuda_bodies.cc). Column sums (a bias's or a norm's
// parameter gradients) run in two stages so that every thread has work:
// one partial sum per chunk of rows and column, then each column's
// partials in chunk order. Every order is fixed, with no atomics: the
// same bits every run. Operands (X: hd.h's Operands or ConstOperands, or
// float pointers) are read as fp32 values; sums are fp32.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "runtime/kernels/ops/hd.h"

namespace zerod::cuda {

// Row x of C values on lanes: the sum of x, then of (x - m)^2 about m.
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
// Rows 16 bytes a lane, for operands of type kT whose rows (and a norm's
// parameters) are whole vectors (rows_in_vectors): lane l takes the row's
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
// Whether rows of C operands of type t at these pointers (row n at n C)
// are whole 16-byte vectors.
inline bool rows_in_vectors(DType t, int64_t C, std::initializer_list<const void*> ps) {
  if (C % (16 / operand_bytes(t)) != 0) return false;
  for (const void* p : ps) {
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}
template <DType kT>
inline bool rows_in_vectors(int64_t C, std::initializer_list<const void*> ps) {
  return rows_in_vectors(kT, C, ps);
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
// A row of out = a + b, lane l taking vectors l, l + lanes, ... as the
// vector bodies above read a row: a lane that then normalizes out reads
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
// them. A norm's forward then reads its row from memory once, a lane's
// loads all in flight before its first sum (LayerNorm's three passes over
// the row took 0.57 of HBM's bandwidth on an H200; load_sum keeps eight in
// flight). Its sums are vec_row_sum's and vec_row_squares_about's over the
// same vectors in the same order, and each norm's held write (layernorm.h,
// rmsnorm.h) its vector write's: the same bits.
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
};
// The fewest vectors a lane holds (4, 8 or 16) for a row of C operands on
// `lanes` lanes, or 0 where a row is longer than 16 a lane (over 4096 bf16
// or 2048 fp32 on a warp): those are read from memory again.
template <DType kT>
ZD_HD int held_vectors(int C, int lanes) {
  const int per_lane = (C / RowVectors<kT>::W + lanes - 1) / lanes;
  return per_lane <= 4 ? 4 : per_lane <= 8 ? 8 : per_lane <= 16 ? 16 : 0;
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

// Chunks of a column sum of N rows over `cols` partials each; a table too
// small for them is a bug of the sizes, so it aborts.
inline int64_t column_chunks(int64_t N, int64_t rows, int64_t cols, const char* what) {
  const int64_t chunks = (N + rows - 1) / rows;
  if (chunks * cols > kColumnPartials) {
    std::fprintf(stderr, "zerod: %s of %lld columns exceeds the table's %lld partial sums\n", what,
                 static_cast<long long>(cols), static_cast<long long>(kColumnPartials));
    std::abort();
  }
  return chunks;
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

}  // namespace zerod::cuda
