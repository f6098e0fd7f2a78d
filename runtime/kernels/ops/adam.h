// Adam and AdamW on fp32 master weights and fp32 states (PyTorch / DeepSpeed
// semantics, bias-corrected), vectorized for the CPU.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/cpu_isa.h"
#include "runtime/kernels/ops/hd.h"

namespace zerod {

struct AdamHyper {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = true;  // AdamW: p -= lr*wd*p; Adam: g += wd*p (L2)
  bool bias_correction = true;
};

// The per-element constants of one step for one parameter group. Every
// kernel (each ISA, fp32 or 8-bit states) computes, in this order, with one
// rounding per operation and fma where written:
//   g  = fma(l2, p, g * grad_scale)
//   m  = fma(beta1, m, (1 - beta1) * g)
//   v  = fma(beta2, v, ((1 - beta2) * g) * g)
//   p  = fma(-step_size, m / fma(sqrt(v), 1/sqrt(bc2), eps), p * shrink)
// so all of them agree bit for bit.
struct AdamStep {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float neg_step_size;  // -lr / (1 - beta1^step)
  float inv_sqrt_bc2;   // 1 / sqrt(1 - beta2^step)
  float shrink;         // 1 - lr * wd (decoupled decay), else 1
  float l2;             // wd (Adam's L2 decay), else 0
  float grad_scale;     // multiplies every gradient first: loss-scale and clipping factor
  // Where set, grad_scale is read from here when the update runs: a factor
  // the device computed (update_factor), which the host never waited for.
  const float* grad_scale_at = nullptr;
};
// `step` is the 1-based update count; `decay` says whether weight decay
// applies to this group (lr and wd may differ per group).
AdamStep make_adam_step(const AdamHyper& h, float lr, int64_t step, float grad_scale, bool decay);

// k with grad_scale read from grad_scale_at where that is set; false where
// that factor is not finite: the update is then skipped, leaving the
// parameters and states as they were (a step whose gradients overflowed).
ZD_HD bool resolve_grad_scale(AdamStep& k) {
  if (!k.grad_scale_at) return true;
  k.grad_scale = *k.grad_scale_at;
  return k.grad_scale - k.grad_scale == 0.0f;  // false for inf and NaN
}

// The factor every gradient of an update is multiplied by, from the sum of
// their squares (taken with the loss scale in them): 1 / loss_scale, times
// clip / (norm + 1e-6) where clip > 0 and that is below 1 (DeepSpeed's
// clipping; norm = sqrt(sumsq) / loss_scale). NaN where sumsq is not finite.
ZD_HD float update_factor(double sumsq, double loss_scale, double clip) {
  if (!(sumsq - sumsq == 0.0)) return static_cast<float>(sumsq - sumsq);  // inf or NaN: NaN
  double factor = 1.0 / loss_scale;
  if (clip > 0) {
    const double coef = clip / (sqrt(sumsq) / loss_scale + 1e-6);
    if (coef < 1.0) factor *= coef;
  }
  return static_cast<float>(factor);
}

// The sum of n units' sums of squares, added in order, at *sumsq, and
// update_factor() of it at *factor.
ZD_HD void update_factor_of_sums(const double* sums, int n, double loss_scale, double clip, float* factor,
                                 double* sumsq) {
  double total = 0;
  for (int u = 0; u < n; ++u) total += sums[u];
  *sumsq = total;
  *factor = update_factor(total, loss_scale, clip);
}

// One tensor, or a shard's piece of one.
struct AdamTensor {
  float* param;  // fp32 master weights
  float* m;
  float* v;
  const void* grad;
  DType grad_type = DType::kF32;  // fp32, bf16 or fp16
  // Optional 16-bit copy of the updated parameters, written in the same pass.
  void* param16 = nullptr;
  DType param16_type = DType::kBF16;  // bf16 or fp16
  int64_t n = 0;
};

// Updates in place, over the machine's cores (OpenMP, in tiles).
void adam_update(const AdamTensor& t, const AdamStep& s, CpuIsa isa = best_cpu_isa());

}  // namespace zerod
