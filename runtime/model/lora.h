// LoRA (Hu et al. 2021) on one of the model's products, through a kernel
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

// The adapters' weights are operands of the kernel table (kernels.h).
struct LoraWeights {
  const void *a, *b;
  int r;
  float scale;  // s
};

struct LoraGrads {
  float *a, *b;
};

// One product's shape: N rows of `in` to `out`. An adapter of a part of a
// wider product (a Llama's q_proj of its fused q, k and v) has that
// product's rows of `width` and adds to their columns [col0, col0 + out).
struct LoraShape {
  int64_t N;
  int in, out;
  int col0 = 0, width = 0;  // width 0: out, the whole product
  int ld() const { return width ? width : out; }
};

// PEFT's lora_dropout on the adapter's input: x' = Kernels::dropout(x) with
// probability p and this product's seed for the pass, x itself when p is
// 0. Backward finds the forward's mask from the same seed.
struct LoraDropout {
  float p = 0;
  uint64_t seed = 0;
};

// The dropout seed of a training pass: micro-batch `micro` of optimizer
// step `step` (1-based) on rank `rank` of a run seeded `run_seed`. A resumed
// run draws the masks the uninterrupted one would.
uint64_t lora_pass_seed(uint64_t run_seed, int64_t step, int micro, int rank);

// Activations and scratch below are operands of the table. u [N, r] =
// s·(x'·A), fp32 operands rounded to `act` (the model's activation type;
// kF32 where the operands are of it already): what backward needs of the
// forward. xd [N, in] is scratch for x'.
void lora_input(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const void* x, void* u,
                DType act = DType::kF32, const LoraDropout& drop = {}, void* xd = nullptr);
// y[N, out] (its part of y [N, width]) += u·B after lora_input; t
// [N, max(in, out)] is scratch.
void lora_forward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const void* x, void* y, void* u,
                  void* t, DType act = DType::kF32, const LoraDropout& drop = {});

// With dy = d(loss)/dy: B's gradient += uᵀ·dy, A's += x'ᵀ·du where
// du = s·dy·Bᵀ, and dx += dropout(du·Aᵀ) (the forward's mask and scale).
// dy is the product's [N, width]; du [N, r] and dt [N, max(in, out)] are
// scratch.
void lora_backward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const LoraGrads& g, const void* x,
                   const void* u, const void* dy, void* dx, void* du, void* dt, const LoraDropout& drop = {});

}  // namespace zerod
