// Adam and AdamW on fp32 master weights and fp32 states (PyTorch / DeepSpeed
// semantics, bias-corrected), vectorized for the CPU.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/cpu_isa.h"

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
};
// `step` is the 1-based update count; `decay` says whether weight decay
// applies to this group (lr and wd may differ per group).
AdamStep make_adam_step(const AdamHyper& h, float lr, int64_t step, float grad_scale, bool decay);

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
