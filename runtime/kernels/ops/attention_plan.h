// Causal attention as the CPU kernel computes it (attention.cc):
// S = QK^T / sqrt(hs), P = causal softmax(S), Y = PV, and back
// dP = dY V^T, dV = P^T dY, dS = P (dP - rowsum(P dP)), dQ = dS K / sqrt(hs),
// dK = dS^T Q / sqrt(hs); but keeping no probabilities between forward and
// backward. The forward saves each row's lse = max + log(sum of exp), from
// which the backward recomputes P = exp(S - lse).
//
// The products run as strided-batched column-major gemms over a chunk of
// heads of one sequence at a time, through two [heads, T, T] matrices of
// scratch; the row work between them is attention.h's. The plan is plain
// C++ over an executor `x` with x.gemm(ColMajorGemm),
// x.softmax_rows(S, lse, T, rows, lse_stride, pos) and
// x.backward_rows(S, dP, lse, T, rows, lse_stride, pos) (row r's lse at
// lse[r / T * lse_stride + r % T], its first key first_key(pos, r % T),
// pos the sequence's positions or null): the CUDA table's runs cuBLAS and
// warp kernels, tests/test_cuda_bodies.cc's OpenBLAS and loops. Packed
// sequences take the whole [T, T] products, their rows masked to their
// document's keys.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/kernels/cuda/gemm_args.h"

namespace zerod::cuda {

// Heads a chunk takes: its two [heads, T, T] matrices within 2^26 floats
// (256 MiB), and at least one head.
inline int attention_chunk_heads(int T, int NH) {
  const int64_t per_head = 2 * int64_t(T) * T;
  return static_cast<int>(std::clamp<int64_t>((int64_t{1} << 26) / per_head, 1, NH));
}

inline int64_t attention_scratch_floats(int T, int NH) { return 2 * int64_t(attention_chunk_heads(T, NH)) * T * T; }

// One chunk: `heads` query heads of sequence b that share no key and value
// head, each the g-th of its group (g = h % group for group = NH / KV), so
// that one strided-batched gemm takes them all: query heads q_stride =
// group hs apart, their key and value heads hs apart. Row-major matrices
// are the column-major transposes, so each product below is taken
// transposed. The g-th heads after the first add their dK and dV to the
// first's (`accumulate`).
struct AttentionChunk {
  int T, C, hs, heads;
  int64_t W;  // a row of qkv: C + 2 KV hs
  int64_t q_stride;
  float scale;
  const float *q, *k, *v;  // the chunk's first heads at position 0, rows W apart
  bool accumulate;
  int64_t TT() const { return int64_t(T) * T; }
  float beta() const { return accumulate ? 1.0f : 0.0f; }

  // S[T, T] = scale Q K^T: S^T = K Q^T.
  ColMajorGemm scores(float* S) const {
    return {true, false, T, T, hs, k, W, q, W, 0.0f, S, T, scale, heads, hs, q_stride, TT()};
  }
  // Y[T, hs] = P V, rows C apart: Y^T = V^T P^T.
  ColMajorGemm values(float* y, const float* P) const {
    return {false, false, hs, T, T, v, W, P, T, 0.0f, y, C, 1.0f, heads, hs, TT(), q_stride};
  }
  // dP[T, T] = dY V^T: dP^T = V dY^T.
  ColMajorGemm dprobs(float* dP, const float* dy) const {
    return {true, false, T, T, hs, v, W, dy, C, 0.0f, dP, T, 1.0f, heads, hs, q_stride, TT()};
  }
  // dV[T, hs] (+)= P^T dY: dV^T = dY^T P.
  ColMajorGemm dvalues(float* dv, const float* P, const float* dy) const {
    return {false, true, hs, T, T, dy, C, P, T, beta(), dv, W, 1.0f, heads, q_stride, TT(), hs};
  }
  // dQ[T, hs] = scale dS K: dQ^T = K^T dS^T.
  ColMajorGemm dqueries(float* dq, const float* dS) const {
    return {false, false, hs, T, T, k, W, dS, T, 0.0f, dq, W, scale, heads, hs, TT(), q_stride};
  }
  // dK[T, hs] (+)= scale dS^T Q: dK^T = Q^T dS.
  ColMajorGemm dkeys(float* dk, const float* dS) const {
    return {false, true, hs, T, T, q, W, dS, T, beta(), dk, W, scale, heads, q_stride, TT(), hs};
  }
};

// Where a chunk's heads are: its first query head h0 and key and value
// head kv0, and the lse rows' stride from one head to the next.
struct ChunkAt {
  int b, h0, kv0;
  int64_t lse_stride;
};

// f(chunk, at) for every chunk of up to per_chunk heads of every sequence:
// for each g in turn, the KV heads' g-th query heads.
template <class F>
void for_each_attention_chunk(const float* qkv, int B, int T, int C, int NH, int KV, int per_chunk, F f) {
  const int hs = C / NH, group = NH / KV;
  const int64_t W = C + 2 * int64_t(KV) * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; ++b) {
    for (int g = 0; g < group; ++g) {
      for (int kv0 = 0; kv0 < KV; kv0 += per_chunk) {
        const int h0 = kv0 * group + g;
        const float* row = qkv + int64_t(b) * T * W;
        const float* k = row + C + int64_t(kv0) * hs;
        const AttentionChunk c{T,     C,
                               hs,    std::min(per_chunk, KV - kv0),
                               W,     int64_t(group) * hs,
                               scale, row + int64_t(h0) * hs,
                               k,     k + int64_t(KV) * hs,
                               g > 0};
        f(c, ChunkAt{b, h0, kv0, int64_t(group) * T});
      }
    }
  }
}

// Sequence b's positions (pos null: none).
inline const int32_t* sequence_positions(const int32_t* pos, int b, int T) {
  return pos ? pos + int64_t(b) * T : nullptr;
}

// out [B, T, C] and lse [B, NH, T] from qkv [B, T, C + 2 KV hs],
// chunk_heads heads at a time (attention_chunk_heads; the scratch holds
// 2 chunk_heads T T); pos as attention.h's.
template <class Exec>
void attention_forward_plan(Exec& x, float* out, float* lse, float* scratch, const float* qkv, int B, int T, int C,
                            int NH, int KV, int chunk_heads, const int32_t* pos = nullptr) {
  for_each_attention_chunk(qkv, B, T, C, NH, KV, chunk_heads, [&](const AttentionChunk& c, const ChunkAt& at) {
    x.gemm(c.scores(scratch));
    x.softmax_rows(scratch, lse + (int64_t(at.b) * NH + at.h0) * T, T, int64_t(c.heads) * T, at.lse_stride,
                   sequence_positions(pos, at.b, T));
    x.gemm(c.values(out + int64_t(at.b) * T * C + int64_t(at.h0) * c.hs, scratch));
  });
}

// dqkv [B, T, C + 2 KV hs] (overwritten) from dout [B, T, C], qkv and lse.
template <class Exec>
void attention_backward_plan(Exec& x, float* dqkv, const float* dout, const float* qkv, const float* lse,
                             float* scratch, int B, int T, int C, int NH, int KV, int chunk_heads,
                             const int32_t* pos = nullptr) {
  for_each_attention_chunk(qkv, B, T, C, NH, KV, chunk_heads, [&](const AttentionChunk& c, const ChunkAt& at) {
    float* P = scratch;
    float* dP = scratch + int64_t(c.heads) * c.TT();
    const float* dy = dout + int64_t(at.b) * T * C + int64_t(at.h0) * c.hs;
    float* row = dqkv + int64_t(at.b) * T * c.W;
    float* dk = row + C + int64_t(at.kv0) * c.hs;
    x.gemm(c.scores(P));
    x.gemm(c.dprobs(dP, dy));
    x.backward_rows(P, dP, lse + (int64_t(at.b) * NH + at.h0) * T, T, int64_t(c.heads) * T, at.lse_stride,
                    sequence_positions(pos, at.b, T));
    x.gemm(c.dvalues(dk + int64_t(KV) * c.hs, P, dy));
    x.gemm(c.dqueries(row + int64_t(at.h0) * c.hs, dP));
    x.gemm(c.dkeys(dk, dP));
  });
}

}  // namespace zerod::cuda
