// What the CUDA kernels' bodies are written with: functions that nvcc
// compiles for the device and any C++ compiler for the host, so that each
// body also runs on the CPU, over the same grid, in a test without a GPU
// (tests/test_cuda_bodies.cc). Element types convert exactly as
// runtime/core/dtype.h converts them. Bodies check the indices they read
// from data (token ids, targets) with assert: in debug builds, on the
// device as on the host.
#pragma once

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/core/dtype.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define ZD_HD __host__ __device__ inline
#else
#define ZD_HD inline
#endif

// Before a loop over a fixed count whose arrays must stay in registers:
// unrolled on the device (indexing a register array at run time would put
// it in local memory); nothing for the host compiler.
#ifdef __CUDA_ARCH__
#define ZD_UNROLL _Pragma("unroll")
#else
#define ZD_UNROLL
#endif

namespace zerod::cuda {

// SplitMix64: a well-mixed 64-bit word from x (seeds, counter hashes).
ZD_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

ZD_HD uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

ZD_HD float bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// bf16: float_to_bf16's rounding (to nearest even; NaN stays NaN).
ZD_HD uint16_t to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
ZD_HD float from_bf16(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// IEEE binary16, round to nearest even.
ZD_HD uint16_t to_f16(float f) {
#ifdef __CUDA_ARCH__
  return __half_as_ushort(__float2half_rn(f));
#else
  return float_to_f16(f);
#endif
}
ZD_HD float from_f16(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  return f16_to_float(h);
#endif
}

// Element i of a float array of type t (fp32, bf16 or fp16) as fp32, and back.
ZD_HD float load_f32(const void* p, DType t, int64_t i) {
  if (t == DType::kBF16) return from_bf16(static_cast<const uint16_t*>(p)[i]);
  if (t == DType::kF16) return from_f16(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
ZD_HD void store_f32(void* p, DType t, int64_t i, float x) {
  if (t == DType::kBF16) {
    static_cast<uint16_t*>(p)[i] = to_bf16(x);
  } else if (t == DType::kF16) {
    static_cast<uint16_t*>(p)[i] = to_f16(x);
  } else {
    static_cast<float*>(p)[i] = x;
  }
}
// An array of operands of type t (fp32, bf16 or fp16), indexed as fp32
// values: what a body reads and writes where the operand type is known at
// run time. The same body templates take a plain float* for fp32.
ZD_HD constexpr int64_t operand_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }
struct OperandRef {
  void* p;
  DType t;
  int64_t i;
  ZD_HD operator float() const { return load_f32(p, t, i); }
  ZD_HD OperandRef& operator=(float x) {
    store_f32(p, t, i, x);
    return *this;
  }
  ZD_HD OperandRef& operator+=(float x) { return *this = static_cast<float>(*this) + x; }
};
struct Operands {
  void* p;
  DType t;
  ZD_HD OperandRef operator[](int64_t i) const { return {p, t, i}; }
  ZD_HD Operands operator+(int64_t n) const { return {static_cast<char*>(p) + n * operand_bytes(t), t}; }
  ZD_HD explicit operator bool() const { return p != nullptr; }
};
struct ConstOperands {
  const void* p;
  DType t;
  ZD_HD float operator[](int64_t i) const { return load_f32(p, t, i); }
  ZD_HD ConstOperands operator+(int64_t n) const {
    return {static_cast<const char*>(p) + n * operand_bytes(t), t};
  }
  ZD_HD explicit operator bool() const { return p != nullptr; }
};

// 16 bytes of operands of type kT (4 fp32, 8 bf16 or fp16), read and
// written as fp32 values element by element as load_f32/store_f32 convert
// them: what a thread moves in one load or store.
struct alignas(16) Bytes16 {
  uint32_t w[4];
};
template <DType kT>
struct Lanes16 {
  static constexpr int kWidth = kT == DType::kF32 ? 4 : 8;  // elements in 16 bytes
  ZD_HD static float get(const Bytes16& v, int k) {
    if constexpr (kT == DType::kF32) return bits_f32(v.w[k]);
    const uint16_t h = static_cast<uint16_t>(v.w[k / 2] >> (16 * (k % 2)));
    return kT == DType::kBF16 ? from_bf16(h) : from_f16(h);
  }
  ZD_HD static void set(Bytes16& v, int k, float x) {
    if constexpr (kT == DType::kF32) {
      v.w[k] = f32_bits(x);
    } else {
      const uint32_t h = kT == DType::kBF16 ? to_bf16(x) : to_f16(x);
      const int shift = 16 * (k % 2);
      v.w[k / 2] = (v.w[k / 2] & ~(0xffffu << shift)) | h << shift;
    }
  }
};

// The member of a group of tensors launched together (g.count members,
// member j's items from g.start[j], starts non-decreasing) that item i of
// the launch falls in: the last j with start[j] <= i, so an empty member
// (start[j] == start[j + 1]) takes none.
template <class Group>
ZD_HD int group_member(const Group& g, int64_t i) {
  int lo = 0, hi = g.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (g.start[mid] <= i) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// x rounded to what t holds.
ZD_HD float round_f32(DType t, float x) {
  if (t == DType::kBF16) return from_bf16(to_bf16(x));
  if (t == DType::kF16) return from_f16(to_f16(x));
  return x;
}

}  // namespace zerod::cuda
