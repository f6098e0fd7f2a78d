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

// Dropout's draw for element i under `seed`: uniform in [0, 1) at 24 bits,
// from a counter hash, so each element's mask is known alone, and a
// backward pass finds its forward's from the seed.
ZD_HD float dropout_draw(uint64_t seed, int64_t i) {
  return static_cast<float>(splitmix64(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i)) >> 40) * 0x1.0p-24f;
}

ZD_HD float dropout_at(float x, float p, uint64_t seed, int64_t i) {
  return dropout_draw(seed, i) >= p ? x / (1.0f - p) : 0.0f;
}

}  // namespace zerod::cuda
