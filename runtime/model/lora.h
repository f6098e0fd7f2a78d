// LoRA (Hu et al. 2021) on one of GPT-2's Conv1D products, through a kernel
// table: beside the frozen y = x·W + b, the low-rank y += s·(x·A)·B with
// A [in, r] and B [r, out] in the model's [in, out] orientation (PEFT's
// lora_A.weight is A transposed, [r, in]; lora_B.weight is B transposed,
// [out, r]) and s = alpha / r (alpha / sqrt(r) with rsLoRA). Backward
// gives A and B their gradients and x the adapter's part of its own; W and
// b get none.
#pragma once

#include <cstdint>

#include "runtime/kernels/kernels.h"

namespace zerod {

struct LoraWeights {
  const float *a, *b;
  int r;
  float scale;  // s
};

struct LoraGrads {
  float *a, *b;
};

// One product's shape: N rows of `in` to `out`.
struct LoraShape {
  int64_t N;
  int in, out;
};

// u [N, r] = s·(x·A), rounded to `act` (the model's activation type): what
// backward needs of the forward.
void lora_input(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const float* x, float* u,
                DType act = DType::kF32);
// y[N, out] += u·B after lora_input; t [N, out] is scratch.
void lora_forward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const float* x, float* y, float* u,
                  float* t, DType act = DType::kF32);

// With dy = d(loss)/dy: B's gradient += uᵀ·dy, A's += xᵀ·du where
// du = s·dy·Bᵀ, and dx += du·Aᵀ. du [N, r] and dt [N, in] are scratch.
void lora_backward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const LoraGrads& g, const float* x,
                   const float* u, const float* dy, float* dx, float* du, float* dt);

}  // namespace zerod
