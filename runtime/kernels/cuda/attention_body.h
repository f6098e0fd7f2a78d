// The row work of causal attention between its matrix products
// (attention_plan.h): each function is one lane's share of one row of a
// [T, T] matrix, lanes taking every lanes-th column from their own, so the
// GPU runs a row on a warp and combines the lanes' partials with shuffles,
// and a test on the CPU runs every lane in turn. A lane reads back only
// the columns it wrote itself, so no lane waits on another within a phase.
//
// Rows hold query position t; its keys are the columns s <= t, the rest
// are masked (probability 0), as in the CPU kernel (cpu/attention.cc).
#pragma once

#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

// The largest scaled score of the row's keys.
ZD_HD float softmax_row_max(const float* S, int64_t t, int lane, int lanes) {
  float mx = -INFINITY;
  for (int64_t s = lane; s <= t; s += lanes) mx = S[s] > mx ? S[s] : mx;
  return mx;
}

// The sum of exp(score - mx) over the row's keys.
ZD_HD float softmax_row_sum(const float* S, int64_t t, float mx, int lane, int lanes) {
  float sum = 0.0f;
  for (int64_t s = lane; s <= t; s += lanes) sum += expf(S[s] - mx);
  return sum;
}

// The row's probabilities in place of its scores, 0 past the keys.
ZD_HD void softmax_row_write(float* S, int64_t t, int T, float mx, float inv, int lane, int lanes) {
  for (int64_t s = lane; s < T; s += lanes) S[s] = s <= t ? expf(S[s] - mx) * inv : 0.0f;
}

// Backward, first phase: the probabilities p = exp(score - lse) in place
// of the scores (0 past the keys), and this lane's part of D = sum p dP.
ZD_HD float probabilities_row(float* S, const float* dP, int64_t t, int T, float lse, int lane, int lanes) {
  float D = 0.0f;
  for (int64_t s = lane; s < T; s += lanes) {
    if (s > t) {
      S[s] = 0.0f;
      continue;
    }
    S[s] = expf(S[s] - lse);
    D += S[s] * dP[s];
  }
  return D;
}

// Second phase: dS = P (dP - D) in place of dP (0 past the keys).
ZD_HD void softmax_backward_row(const float* P, float* dP, int64_t t, int T, float D, int lane, int lanes) {
  for (int64_t s = lane; s < T; s += lanes) dP[s] = s <= t ? P[s] * (dP[s] - D) : 0.0f;
}

}  // namespace zerod::cuda
