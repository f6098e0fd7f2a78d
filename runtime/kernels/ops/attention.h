// Causal multi-head self-attention over qkv [B, T, C + 2 KV hs] (q: NH
// heads of hs = C / NH; k and v: KV heads each, a key and value head
// shared by the NH / KV query heads after it: grouped-query attention,
// multi-head where KV = NH):
//   S = Q K^T / sqrt(hs), P = causal softmax(S) (keys s <= t), Y = P V
//   dP = dY V^T, dV = P^T dY, dS = P (dP - rowsum(P dP)),
//   dQ = dS K / sqrt(hs), dK = dS^T Q / sqrt(hs)
// (a shared head's dK and dV the sums over its query heads, in head order)
// keeping no probabilities between forward and backward: the forward
// saves each row's statistics, from which the backward recomputes P with
// the forward's bits. Bound by the products (4 T^2 hs multiply-adds a head
// forward, twice that backward) where T is long, by the [T, T] rows'
// passes over memory where the products are unfused and T short.
//
// The CPU's (attention.cc) takes query rows in blocks through OpenBLAS. On
// the GPU, cuDNN's fused attention runs 16-bit operands where it takes the
// shape (cuda/cudnn_sdpa.h); otherwise attention_plan.h's products through
// cuBLAS and the row bodies below, a row on a warp (attention.cuh).
#pragma once

#include <cassert>
#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/kernels/ops/hd.h"

namespace zerod {
namespace cpu {

// Causal attention. qkv is [B,T,C + 2 KV hs] (q of C, k and v of KV hs),
// out is [B,T,C] with heads side by side, and stats [B,NH,T,2] what the
// backward needs of the forward's softmax: each query row's largest score
// and the reciprocal of its sum of exponentials, from which it recomputes
// the probabilities with the forward's bits. Both take query rows in
// blocks of attention_block_rows(T) (all T rows up to T = 2048), through a
// [2, block_rows, T] scratch per OpenMP thread: attention_scratch_floats.
// `pos` (null: each sequence one document): packed sequences, row b*T + t
// at position pos[b*T + t] of its document, a document starting where a
// position is 0; a query sees only its own document's keys, and each
// document is computed as a sequence of its own.
void attention_forward(float* out, float* stats, float* scratch, const float* qkv, int B, int T, int C, int NH, int KV,
                       const int32_t* pos = nullptr);
// dqkv overwritten. The probabilities are rounded to `rounded`'s values
// (kF32: none) before use, as a 16-bit job's saved activations are.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* stats, float* scratch, int B,
                        int T, int C, int NH, int KV, DType rounded, const int32_t* pos = nullptr);
int attention_block_rows(int T);
int64_t attention_scratch_floats(int T, int threads);
int64_t attention_scratch_floats(int T);  // at omp_get_max_threads()
// The same with blocks of `block_rows` (tests take several blocks at small T).
void attention_forward(float* out, float* stats, float* scratch, const float* qkv, int B, int T, int C, int NH, int KV,
                       int block_rows, const int32_t* pos = nullptr);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* stats, float* scratch, int B,
                        int T, int C, int NH, int KV, DType rounded, int block_rows, const int32_t* pos = nullptr);

}  // namespace cpu

namespace cuda {

// The row work of causal attention between its matrix products
// (attention_plan.h): each function is one lane's share of one row of a
// [T, T] matrix, lanes taking every lanes-th column from their own, so the
// GPU runs a row on a warp and combines the lanes' partials with shuffles,
// and a test on the CPU runs every lane in turn. A lane reads back only
// the columns it wrote itself, so no lane waits on another within a phase.
//
// Rows hold query position t; its keys are the columns lo <= s <= t (lo
// the first row of its document: 0 but for packed sequences), the rest
// are masked (probability 0), as in the CPU kernel (attention.cc).

// The first key of row t of a sequence whose positions are `pos` (null:
// one document).
ZD_HD int64_t first_key(const int32_t* pos, int64_t t) {
  assert(!pos || (pos[t] >= 0 && pos[t] <= t));
  return pos ? t - pos[t] : 0;
}

// The largest scaled score of the row's keys.
ZD_HD float softmax_row_max(const float* S, int64_t lo, int64_t t, int lane, int lanes) {
  float mx = -INFINITY;
  for (int64_t s = lo + lane; s <= t; s += lanes) mx = S[s] > mx ? S[s] : mx;
  return mx;
}

// The sum of exp(score - mx) over the row's keys.
ZD_HD float softmax_row_sum(const float* S, int64_t lo, int64_t t, float mx, int lane, int lanes) {
  float sum = 0.0f;
  for (int64_t s = lo + lane; s <= t; s += lanes) sum += expf(S[s] - mx);
  return sum;
}

// The row's probabilities in place of its scores, 0 outside the keys.
ZD_HD void softmax_row_write(float* S, int64_t lo, int64_t t, int T, float mx, float inv, int lane, int lanes) {
  for (int64_t s = lane; s < T; s += lanes) S[s] = s >= lo && s <= t ? expf(S[s] - mx) * inv : 0.0f;
}

// Backward, first phase: the probabilities p = exp(score - lse) in place
// of the scores (0 outside the keys), and this lane's part of D = sum p dP.
ZD_HD float probabilities_row(float* S, const float* dP, int64_t lo, int64_t t, int T, float lse, int lane, int lanes) {
  float D = 0.0f;
  for (int64_t s = lane; s < T; s += lanes) {
    if (s < lo || s > t) {
      S[s] = 0.0f;
      continue;
    }
    S[s] = expf(S[s] - lse);
    D += S[s] * dP[s];
  }
  return D;
}

// Second phase: dS = P (dP - D) in place of dP (0 outside the keys).
ZD_HD void softmax_backward_row(const float* P, float* dP, int64_t lo, int64_t t, int T, float D, int lane, int lanes) {
  for (int64_t s = lane; s < T; s += lanes) dP[s] = s >= lo && s <= t ? P[s] * (dP[s] - D) : 0.0f;
}

}  // namespace cuda
}  // namespace zerod
