// Element types of tensors and the conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"

namespace zerod {

enum class DType : uint8_t { kF32, kBF16, kF16, kI8, kU8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

// bf16: the top half of an fp32, rounded to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 with round to nearest even; values past 65504 become inf.
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

// Bulk conversions between fp32 and another float type (kF32 copies).
void convert_from_f32(DType to, const float* src, void* dst, size_t n);
void convert_to_f32(DType from, const void* src, float* dst, size_t n);
// dst[i] = (onto_zero ? 0 : dst[i]) + src[i] widened to fp32: one pass over
// host memory for a sum of 16-bit parts (0 + -0 is +0, as onto zeros).
void accumulate_f32(DType from, const void* src, float* dst, size_t n, bool onto_zero);
// The same for each source in turn, in one pass: the bits of one call per
// source, in order, with dst read and written once.
void accumulate_f32(DType from, absl::Span<const void* const> srcs, float* dst, size_t n, bool onto_zero);
// Rounds fp32 values in place to what `t` can hold (no-op for kF32).
void round_to(DType t, float* x, size_t n);

}  // namespace zerod
