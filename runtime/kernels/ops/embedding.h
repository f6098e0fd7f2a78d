// The embedding of B sequences of T token ids:
//   forward:  y[b, t] = wte[tokens[b, t]] + wpe[p]     (wpe null: no learned positions, a Llama's)
//   backward: dwte[tokens[b, t]] += dy[b, t]; dwpe[p] += dy[b, t]
// at position p = t, or of packed sequences p = pos[b, t] (the position
// in its document: positions restart at each document),
// each gradient element adding its positions in position order, so that
// every table gives the CPU's bits. Memory-bound: the forward reads a row
// of wte (and wpe) and writes a row of y a position; the backward reads
// dy once and each gradient row it adds to.
//
// The CPU's (embedding.cc) walks positions in order with its columns split
// across threads; the CUDA table's (embedding.cuh) runs the bodies below:
// a thread an element (16 bytes a thread where rows are whole vectors)
// forward, a block a token's run of positions backward.
#pragma once

#include <cassert>
#include <cstdint>

#include "runtime/kernels/ops/hd.h"
#include "runtime/kernels/ops/rows.h"

namespace zerod {
namespace cpu {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[p,:] (wpe null: no positions, a
// Llama's), p = t or pos[b,t] where pos is not null.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       const int32_t* pos = nullptr);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[p,:] += dout[b,t,:] where dwpe
// is not null.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                        const int32_t* pos = nullptr);

// Row n's position: n % T, or pos[n] where pos is not null.
ZD_HD int64_t position_of(const int32_t* pos, int64_t n, int T) {
  assert(!pos || (pos[n] >= 0 && pos[n] <= n % T));
  return pos ? pos[n] : n % T;
}

}  // namespace cpu

namespace cuda {

// Element j of the [B*T, C] output; wpe null: no positions.
template <class O, class W>
ZD_HD void embedding_forward_at(int64_t j, O out, const int32_t* tokens, W wte, W wpe, int T, int C,
                                const int32_t* pos) {
  const int64_t row = j / C, i = j % C;
  assert(tokens[row] >= 0);
  const float e = wte[int64_t(tokens[row]) * C + i];
  out[j] = wpe ? e + wpe[cpu::position_of(pos, row, T) * C + i] : e;
}

// The same 16 bytes a thread (rows of C whole vectors, every pointer
// 16-byte aligned): thread t takes vector t of the [B*T, C] output, each
// element the same fp32 sum rounded as the one-element path's.
template <DType kT>
ZD_HD void vec_embedding_forward_at(int64_t t, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                    int T, int C, const int32_t* pos) {
  using V = RowVectors<kT>;
  const int vectors = C / V::W;
  const int64_t row = t / vectors;
  const int i = static_cast<int>(t % vectors);
  assert(tokens[row] >= 0);
  float e[V::W], p[V::W];
  V::load(wte, int64_t(tokens[row]) * vectors + i, e);
  if (wpe) {
    V::load(wpe, cpu::position_of(pos, row, T) * vectors + i, p);
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

}  // namespace cuda
}  // namespace zerod
