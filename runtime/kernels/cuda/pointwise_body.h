// Per-element bodies of the pointwise kernels: GELU (tanh approximation),
// as cpu/pointwise.cc computes it.
#pragma once

#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

ZD_HD float gelu(float x) { return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x))); }

ZD_HD float gelu_grad(float x, float dout) {
  const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - th * th;
  const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return grad * dout;
}

}  // namespace zerod::cuda
