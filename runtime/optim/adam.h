// Adam and AdamW on fp32 states (PyTorch / DeepSpeed semantics, bias-corrected).
#pragma once

#include <cstdint>

namespace zerod {

struct AdamHyper {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = true;  // AdamW: p -= lr*wd*p; Adam: g += wd*p (L2)
};

// One step over n elements. `grad_scale` multiplies every gradient first (the
// loss-scale and clipping factor), `step` is the 1-based update count, and
// `decay` says whether weight decay applies to this tensor.
void adam_step(float* params, const float* grads, float* m, float* v, int64_t n, const AdamHyper& h, float lr,
               int64_t step, float grad_scale, bool decay);

}  // namespace zerod
