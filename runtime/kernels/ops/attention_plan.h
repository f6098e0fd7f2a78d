// Causal attention as the CPU kernel computes it (attention.cc):
// S = QK^T / sqrt(hs), P = causal softmax(S), Y = PV, and back
// dP = dY V^T, dV = P^T dY, dS = P (dP - rowsum(P dP)), dQ = dS K / sqrt(hs),
// dK = dS^T Q / sqrt(hs); but keeping no probabilities between forward and
// backward. The forward saves each row's lse = max + log(sum of exp), from
// which the backward recomputes P = exp(S - lse).
//
// The products run as strided-batched column-major gemms over a chunk of
// heads of one sequence at a time (heads are hs floats apart in a row of
// qkv or out), through two [heads, T, T] matrices of scratch; the row work
// between them is attention.h's. The plan is plain C++ over an
// executor `x` with x.gemm(ColMajorGemm), x.softmax_rows(S, lse, T, rows)
// and x.backward_rows(S, dP, lse, T, rows): the CUDA table's runs cuBLAS and
// warp kernels, tests/test_cuda_bodies.cc's OpenBLAS and loops.
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

// One chunk: heads [h0, h0 + heads) of sequence b. Row-major matrices are
// the column-major transposes, so each product below is taken transposed.
struct AttentionChunk {
  int T, C, hs, heads;
  float scale;
  const float *q, *k, *v;  // head h0 at position 0, rows 3C apart
  int64_t TT() const { return int64_t(T) * T; }
  int64_t C3() const { return 3 * int64_t(C); }

  // S[T, T] = scale Q K^T: S^T = K Q^T.
  ColMajorGemm scores(float* S) const {
    return {true, false, T, T, hs, k, C3(), q, C3(), 0.0f, S, T, scale, heads, hs, hs, TT()};
  }
  // Y[T, hs] = P V, rows C apart: Y^T = V^T P^T.
  ColMajorGemm values(float* y, const float* P) const {
    return {false, false, hs, T, T, v, C3(), P, T, 0.0f, y, C, 1.0f, heads, hs, TT(), hs};
  }
  // dP[T, T] = dY V^T: dP^T = V dY^T.
  ColMajorGemm dprobs(float* dP, const float* dy) const {
    return {true, false, T, T, hs, v, C3(), dy, C, 0.0f, dP, T, 1.0f, heads, hs, hs, TT()};
  }
  // dV[T, hs] = P^T dY: dV^T = dY^T P.
  ColMajorGemm dvalues(float* dv, const float* P, const float* dy) const {
    return {false, true, hs, T, T, dy, C, P, T, 0.0f, dv, C3(), 1.0f, heads, hs, TT(), hs};
  }
  // dQ[T, hs] = scale dS K: dQ^T = K^T dS^T.
  ColMajorGemm dqueries(float* dq, const float* dS) const {
    return {false, false, hs, T, T, k, C3(), dS, T, 0.0f, dq, C3(), scale, heads, hs, TT(), hs};
  }
  // dK[T, hs] = scale dS^T Q: dK^T = Q^T dS.
  ColMajorGemm dkeys(float* dk, const float* dS) const {
    return {false, true, hs, T, T, q, C3(), dS, T, 0.0f, dk, C3(), scale, heads, hs, TT(), hs};
  }
};

// f(chunk, b, h0) for every chunk of up to per_chunk heads of every
// sequence.
template <class F>
void for_each_attention_chunk(const float* qkv, int B, int T, int C, int NH, int per_chunk, F f) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; ++b) {
    for (int h0 = 0; h0 < NH; h0 += per_chunk) {
      const float* q = qkv + int64_t(b) * T * 3 * C + int64_t(h0) * hs;
      const AttentionChunk c{T, C, hs, std::min(per_chunk, NH - h0), scale, q, q + C, q + 2 * int64_t(C)};
      f(c, b, h0);
    }
  }
}

// out [B, T, C] and lse [B, NH, T] from qkv [B, T, 3C], chunk_heads heads
// at a time (attention_chunk_heads; the scratch holds 2 chunk_heads T T).
template <class Exec>
void attention_forward_plan(Exec& x, float* out, float* lse, float* scratch, const float* qkv, int B, int T, int C,
                            int NH, int chunk_heads) {
  for_each_attention_chunk(qkv, B, T, C, NH, chunk_heads, [&](const AttentionChunk& c, int b, int h0) {
    x.gemm(c.scores(scratch));
    x.softmax_rows(scratch, lse + (int64_t(b) * NH + h0) * T, T, int64_t(c.heads) * T);
    x.gemm(c.values(out + int64_t(b) * T * C + int64_t(h0) * c.hs, scratch));
  });
}

// dqkv [B, T, 3C] (overwritten) from dout [B, T, C], qkv and lse.
template <class Exec>
void attention_backward_plan(Exec& x, float* dqkv, const float* dout, const float* qkv, const float* lse,
                             float* scratch, int B, int T, int C, int NH, int chunk_heads) {
  for_each_attention_chunk(qkv, B, T, C, NH, chunk_heads, [&](const AttentionChunk& c, int b, int h0) {
    float* P = scratch;
    float* dP = scratch + int64_t(c.heads) * c.TT();
    const float* dy = dout + int64_t(b) * T * C + int64_t(h0) * c.hs;
    float* dq = dqkv + int64_t(b) * T * c.C3() + int64_t(h0) * c.hs;
    x.gemm(c.scores(P));
    x.gemm(c.dprobs(dP, dy));
    x.backward_rows(P, dP, lse + (int64_t(b) * NH + h0) * T, T, int64_t(c.heads) * T);
    x.gemm(c.dvalues(dq + 2 * int64_t(C), P, dy));
    x.gemm(c.dqueries(dq, dP));
    x.gemm(c.dkeys(dq + C, dP));
  });
}

}  // namespace zerod::cuda
