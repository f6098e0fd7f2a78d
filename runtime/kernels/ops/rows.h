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
