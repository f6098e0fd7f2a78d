#include "runtime/core/dtype.h"

#include <algorithm>
#include <cstring>

namespace zerod {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kI8:
    case DType::kU8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
  }
  return "?";
}

uint16_t float_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): scale so the 10 mantissa bits land in place.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // under half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (112 - exp) + 13 - 13
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      exp = 113;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Below this many elements the loops stay on the calling thread: waking
// the OpenMP team costs more than it saves.
constexpr size_t kParallelMin = size_t{1} << 18;

void convert_from_f32(DType to, const float* src, void* dst, size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  if (to == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else if (to == DType::kBF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (size_t i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
  }
}

void convert_to_f32(DType from, const void* src, float* dst, size_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  if (from == DType::kF32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else if (from == DType::kBF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (size_t i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]);
  }
}

namespace {
// Tile by tile, so that a tile of dst stays in cache while each source is
// added to it in turn: dst and every source pass through memory once, and
// each element's adds keep their order.
template <class T, class Widen>
void accumulate_as(const Widen& widen, absl::Span<const void* const> srcs, float* dst, size_t n, bool onto_zero) {
  constexpr size_t kTile = 2048;
  const auto tiles = static_cast<int64_t>((n + kTile - 1) / kTile);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t t = 0; t < tiles; ++t) {
    const size_t begin = static_cast<size_t>(t) * kTile, end = std::min(n, begin + kTile);
    for (size_t j = 0; j < srcs.size(); ++j) {
      const T* s = static_cast<const T*>(srcs[j]);
      const bool zero = j == 0 && onto_zero;
      for (size_t i = begin; i < end; ++i) dst[i] = (zero ? 0.0f : dst[i]) + widen(s[i]);
    }
  }
}
}  // namespace

void accumulate_f32(DType from, absl::Span<const void* const> srcs, float* dst, size_t n, bool onto_zero) {
  if (srcs.empty()) {
    if (onto_zero) std::memset(dst, 0, n * sizeof(float));
    return;
  }
  if (from == DType::kF32) {
    accumulate_as<float>([](float x) { return x; }, srcs, dst, n, onto_zero);
  } else if (from == DType::kBF16) {
    accumulate_as<uint16_t>([](uint16_t x) { return bf16_to_float(x); }, srcs, dst, n, onto_zero);
  } else {
    accumulate_as<uint16_t>([](uint16_t x) { return f16_to_float(x); }, srcs, dst, n, onto_zero);
  }
}

void accumulate_f32(DType from, const void* src, float* dst, size_t n, bool onto_zero) {
  accumulate_f32(from, {&src, 1}, dst, n, onto_zero);
}

void round_to(DType t, float* x, size_t n) {
  if (t == DType::kBF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
  } else if (t == DType::kF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (size_t i = 0; i < n; ++i) x[i] = f16_to_float(float_to_f16(x[i]));
  }
}

}  // namespace zerod
