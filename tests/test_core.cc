// Core runtime: bf16/fp16 conversions against independent references, the
// memory accountant, host buffers, byte sizes and tensors.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/node_memory.h"
#include "tests/temp_dir.h"

namespace zerod {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ================================================================ bf16

TEST(Bf16, KnownEncodings) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  // 3.140625 = 0x40490000: exactly representable.
  EXPECT_EQ(float_to_bf16(3.140625f), 0x4049);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc000), -2.0f);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie, 0x3f80 is even
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie, 0x3f81 is odd
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // just above the tie
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fffu)), 0x3f80);  // just below
  EXPECT_EQ(float_to_bf16(from_bits(0xbf818000u)), 0xbf82);  // negative tie
  EXPECT_EQ(float_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
}

TEST(Bf16, NanAndInf) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16(inf), 0x7f80);
  EXPECT_EQ(float_to_bf16(-inf), 0xff80);
  EXPECT_TRUE(std::isinf(bf16_to_float(0x7f80)));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must not become inf.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0xff800001u)))));
}

TEST(Bf16, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    EXPECT_EQ(to_bits(f), h << 16);
    const uint16_t back = float_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(back))) << std::hex << h;
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

// Reference: of the two bf16 values around f (truncation and the next one up in
// magnitude) pick the nearer, ties to the even pattern; past the largest finite
// value the next one is 2^128 (inf).
uint16_t ref_bf16(float f) {
  const uint32_t u = to_bits(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xffffu) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  auto value = [](uint16_t b) {
    if ((b & 0x7fffu) == 0x7f80u) return std::ldexp((b & 0x8000u) ? -1.0 : 1.0, 128);
    return static_cast<double>(from_bits(static_cast<uint32_t>(b) << 16));
  };
  const double dlo = std::fabs(static_cast<double>(f) - value(lo));
  const double dhi = std::fabs(value(hi) - static_cast<double>(f));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(Bf16, RandomFloatsMatchReference) {
  std::mt19937 rng(11);
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = rng();
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf/NaN covered above
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
    const float f = from_bits(u);
    ASSERT_EQ(float_to_bf16(f), ref_bf16(f)) << std::hex << u;
  }
}

// ================================================================ fp16

// Independent decoding of the non-negative half patterns 0..0x7c00, where
// 0x7c00 (inf) stands for 2^16, the value rounding treats as the next step
// past 65504.
const std::vector<double>& half_values() {
  static const std::vector<double> vals = [] {
    std::vector<double> v(0x7c01);
    for (int p = 0; p <= 0x7c00; ++p) {
      const int e = p >> 10, m = p & 0x3ff;
      v[p] = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    }
    return v;
  }();
  return vals;
}

// Reference rounding: bisect the sorted finite half values, nearest wins, ties
// go to the even mantissa; 2^16 and above is inf.
uint16_t ref_f16(float f) {
  const std::vector<double>& vals = half_values();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= vals[0x7c00]) return sign | 0x7c00;
  const size_t i = std::lower_bound(vals.begin(), vals.end(), a) - vals.begin();
  if (vals[i] == a) return static_cast<uint16_t>(sign | i);
  const size_t lo = i - 1, hi = i;
  const double dlo = a - vals[lo], dhi = vals[hi] - a;
  const size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint16_t>(sign | pick);
}

TEST(Fp16, DecodesEveryPatternLikeTheReference) {
  const std::vector<double>& vals = half_values();
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    const uint32_t mag = h & 0x7fffu;
    if (mag > 0x7c00u) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
    } else if (mag == 0x7c00u) {
      EXPECT_TRUE(std::isinf(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0);
    } else {
      EXPECT_EQ(static_cast<double>(f), (h & 0x8000u) ? -vals[mag] : vals[mag]) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0);
    }
  }
}

TEST(Fp16, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    const uint16_t back = float_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(back))) << std::hex << h;
    } else {
      EXPECT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(Fp16, RangeEdges) {
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // the tie past 65504 goes to inf
  EXPECT_EQ(float_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(from_bits(0x7f800001u)))));

  const float tiny = std::ldexp(1.0f, -24);  // smallest subnormal
  EXPECT_EQ(float_to_f16(tiny), 0x0001);
  EXPECT_EQ(f16_to_float(0x0001), tiny);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even (0)
  EXPECT_EQ(float_to_f16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(float_to_f16(1.5f * std::ldexp(1.0f, -25)), 0x0001);  // above the tie
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(float_to_f16(3.0f * std::ldexp(1.0f, -25)), 0x0002);  // tie 1.5 * 2^-24 -> even 2
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
}

TEST(Fp16, RandomFloatsMatchReference) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> exponent(-30, 17);  // below the subnormals to past 65504
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = (rng() & 0x80000000u) | (static_cast<uint32_t>(127 + exponent(rng)) << 23) |
                          (rng() & 0x7fffffu);
    const float f = from_bits(bits);
    ASSERT_EQ(float_to_f16(f), ref_f16(f)) << f << " bits " << std::hex << bits;
  }
}

TEST(Fp16, EveryTieMatchesReference) {
  // The midpoint between every pair of neighbouring halves (exact in fp32),
  // subnormals and 65520 included.
  const std::vector<double>& vals = half_values();
  for (int p = 0; p < 0x7c00; ++p) {
    const float mid = static_cast<float>((vals[p] + vals[p + 1]) / 2);
    ASSERT_EQ(static_cast<double>(mid), (vals[p] + vals[p + 1]) / 2);
    ASSERT_EQ(float_to_f16(mid), ref_f16(mid)) << std::hex << p;
    ASSERT_EQ(float_to_f16(-mid), ref_f16(-mid)) << std::hex << p;
  }
}

// ================================================================ bulk conversions

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1000.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  v[0] = 0.0f;
  v[1] = -0.0f;
  v[2] = 70000.0f;
  v[3] = 1e-7f;
  return v;
}

TEST(BulkConvert, MatchesScalarFunctions) {
  constexpr size_t kN = 10007;
  const std::vector<float> src = random_floats(kN, 3);
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> half(kN);
    convert_from_f32(t, src.data(), half.data(), kN);
    std::vector<float> back(kN), rounded = src;
    convert_to_f32(t, half.data(), back.data(), kN);
    round_to(t, rounded.data(), kN);
    for (size_t i = 0; i < kN; ++i) {
      const uint16_t h = t == DType::kBF16 ? float_to_bf16(src[i]) : float_to_f16(src[i]);
      const float f = t == DType::kBF16 ? bf16_to_float(h) : f16_to_float(h);
      ASSERT_EQ(half[i], h) << dtype_name(t) << " i=" << i;
      ASSERT_EQ(to_bits(back[i]), to_bits(f)) << dtype_name(t) << " i=" << i;
      ASSERT_EQ(to_bits(rounded[i]), to_bits(f)) << dtype_name(t) << " i=" << i;
    }
  }
}

TEST(BulkConvert, RoundToF32IsANoOp) {
  std::vector<float> v = random_floats(1000, 4);
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[6] = from_bits(0x00000001u);  // fp32 subnormal
  const std::vector<float> before = v;
  round_to(DType::kF32, v.data(), v.size());
  EXPECT_EQ(std::memcmp(v.data(), before.data(), v.size() * sizeof(float)), 0);
}

// One pass widens and adds: the bits of convert_to_f32 then fp32 adds, onto
// the sum or onto zeros (so -0 parts give +0), for every type, across the
// size where the loop goes parallel.
TEST(DTypes, AccumulatingIsWideningThenAdding) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t n : {size_t{7}, (size_t{1} << 18) + 3}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", n " << n);
      std::mt19937 rng(static_cast<uint32_t>(n));
      std::normal_distribution<float> d(0.0f, 3.0f);
      std::vector<float> x(n), sum(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = i % 5 == 0 ? -0.0f : d(rng);
        sum[i] = d(rng);
      }
      std::vector<uint8_t> src(n * dtype_size(t));
      convert_from_f32(t, x.data(), src.data(), n);
      std::vector<float> wide(n), onto_sum = sum, want_sum = sum, onto_zero(n, 123.0f), want_zero(n, 0.0f);
      convert_to_f32(t, src.data(), wide.data(), n);
      for (size_t i = 0; i < n; ++i) {
        want_sum[i] += wide[i];
        want_zero[i] += wide[i];
      }
      accumulate_f32(t, src.data(), onto_sum.data(), n, false);
      accumulate_f32(t, src.data(), onto_zero.data(), n, true);
      EXPECT_EQ(std::memcmp(onto_sum.data(), want_sum.data(), n * 4), 0);
      EXPECT_EQ(std::memcmp(onto_zero.data(), want_zero.data(), n * 4), 0);
      EXPECT_FALSE(std::signbit(onto_zero[0]));  // -0 onto zeros is +0
    }
  }
}

// Several sources in one pass: each widened and added in turn, against a
// naive loop, onto the sum and onto zeros (-0 first gives +0), with none
// (zeros, or nothing changed), one and four sources, across the parallel
// threshold and tiles.
TEST(DTypes, AccumulatingSeveralInOnePassIsAddingEachInTurn) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t n : {size_t{7}, size_t{2048 * 3 + 5}, (size_t{1} << 18) + 3}) {
      for (size_t k : {0, 1, 4}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", n " << n << ", " << k << " sources");
        std::mt19937 rng(static_cast<uint32_t>(n + k));
        std::normal_distribution<float> d(0.0f, 3.0f);
        std::vector<std::vector<uint8_t>> src(k, std::vector<uint8_t>(n * dtype_size(t)));
        std::vector<const void*> srcs;
        for (auto& s : src) {
          std::vector<float> x(n);
          for (size_t i = 0; i < n; ++i) x[i] = i % 5 == 0 ? -0.0f : d(rng);
          convert_from_f32(t, x.data(), s.data(), n);
          srcs.push_back(s.data());
        }
        std::vector<float> sum(n);
        for (float& x : sum) x = d(rng);
        std::vector<float> want_sum = sum, want_zero(n, 123.0f), onto_sum = sum, onto_zero(n, 123.0f);
        // A naive loop over the widened sources.
        if (k == 0) std::fill(want_zero.begin(), want_zero.end(), 0.0f);
        for (size_t j = 0; j < k; ++j) {
          std::vector<float> wide(n);
          convert_to_f32(t, srcs[j], wide.data(), n);
          for (size_t i = 0; i < n; ++i) {
            want_sum[i] += wide[i];
            want_zero[i] = (j == 0 ? 0.0f : want_zero[i]) + wide[i];
          }
        }
        accumulate_f32(t, srcs, onto_sum.data(), n, false);
        accumulate_f32(t, srcs, onto_zero.data(), n, true);
        EXPECT_EQ(std::memcmp(onto_sum.data(), want_sum.data(), n * 4), 0);
        EXPECT_EQ(std::memcmp(onto_zero.data(), want_zero.data(), n * 4), 0);
        EXPECT_FALSE(std::signbit(onto_zero[0]));
      }
    }
  }
}

TEST(DTypes, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  EXPECT_EQ(dtype_size(DType::kU8), 1u);
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kF16), "fp16");
}

// ================================================================ MemoryAccountant

TEST(MemoryAccountant, TracksCurrentAndPeaks) {
  MemoryAccountant a;
  ASSERT_TRUE(a.reserve(Tier::kHost, Category::kParams, 100).ok());
  ASSERT_TRUE(a.reserve(Tier::kHost, Category::kGrads, 50).ok());
  ASSERT_TRUE(a.reserve(Tier::kHost, Category::kParams, 20).ok());
  EXPECT_EQ(a.current(Tier::kHost, Category::kParams), 120u);
  EXPECT_EQ(a.current(Tier::kHost, Category::kGrads), 50u);
  EXPECT_EQ(a.current_total(Tier::kHost), 170u);
  EXPECT_EQ(a.peak_total(Tier::kHost), 170u);

  a.release(Tier::kHost, Category::kParams, 120);
  EXPECT_EQ(a.current(Tier::kHost, Category::kParams), 0u);
  EXPECT_EQ(a.peak(Tier::kHost, Category::kParams), 120u);
  EXPECT_EQ(a.current_total(Tier::kHost), 50u);
  EXPECT_EQ(a.peak_total(Tier::kHost), 170u);

  // Tiers are separate.
  EXPECT_EQ(a.current_total(Tier::kGpu), 0u);
  EXPECT_EQ(a.peak(Tier::kPinned, Category::kParams), 0u);
  ASSERT_TRUE(a.reserve(Tier::kNvme, Category::kOffload, 7).ok());
  EXPECT_EQ(a.current(Tier::kNvme, Category::kOffload), 7u);
  EXPECT_EQ(a.current_total(Tier::kHost), 50u);
}

TEST(MemoryAccountant, PeakTotalIsThePeakOfTheSum) {
  MemoryAccountant a;
  ASSERT_TRUE(a.reserve(Tier::kGpu, Category::kActivations, 100).ok());
  a.release(Tier::kGpu, Category::kActivations, 100);
  ASSERT_TRUE(a.reserve(Tier::kGpu, Category::kWorkspace, 80).ok());
  EXPECT_EQ(a.peak(Tier::kGpu, Category::kActivations), 100u);
  EXPECT_EQ(a.peak(Tier::kGpu, Category::kWorkspace), 80u);
  // Never more than 100 at once, though the per-category peaks add up to 180.
  EXPECT_EQ(a.peak_total(Tier::kGpu), 100u);
  ASSERT_TRUE(a.reserve(Tier::kGpu, Category::kActivations, 30).ok());
  EXPECT_EQ(a.peak_total(Tier::kGpu), 110u);
}

TEST(MemoryAccountant, ResetPeaksRestartsFromCurrent) {
  MemoryAccountant a;
  ASSERT_TRUE(a.reserve(Tier::kHost, Category::kOptimizer, 1000).ok());
  a.release(Tier::kHost, Category::kOptimizer, 700);
  ASSERT_EQ(a.peak(Tier::kHost, Category::kOptimizer), 1000u);
  a.reset_peaks();
  EXPECT_EQ(a.peak(Tier::kHost, Category::kOptimizer), 300u);
  EXPECT_EQ(a.peak_total(Tier::kHost), 300u);
  EXPECT_EQ(a.current(Tier::kHost, Category::kOptimizer), 300u);
  ASSERT_TRUE(a.reserve(Tier::kHost, Category::kComm, 50).ok());
  EXPECT_EQ(a.peak_total(Tier::kHost), 350u);
}

TEST(MemoryAccountant, LimitRefusesWithoutRecording) {
  MemoryAccountant a;
  a.set_limit(Tier::kHost, 1000);
  EXPECT_EQ(a.limit(Tier::kHost), 1000u);
  EXPECT_EQ(a.limit(Tier::kGpu), 0u);
  ASSERT_TRUE(a.reserve(Tier::kHost, Category::kParams, 600).ok());
  const absl::Status s = a.reserve(Tier::kHost, Category::kGrads, 401);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "allocating 401 bytes of grads on host would exceed the host memory limit of 1000 bytes "
            "(600 bytes in use: params 600)");
  EXPECT_EQ(a.current(Tier::kHost, Category::kGrads), 0u);
  EXPECT_EQ(a.peak(Tier::kHost, Category::kGrads), 0u);
  EXPECT_EQ(a.current_total(Tier::kHost), 600u);
  EXPECT_EQ(a.peak_total(Tier::kHost), 600u);
  // Exactly up to the limit is allowed; other tiers are unaffected.
  EXPECT_TRUE(a.reserve(Tier::kHost, Category::kGrads, 400).ok());
  EXPECT_EQ(a.current_total(Tier::kHost), 1000u);
  EXPECT_TRUE(a.reserve(Tier::kGpu, Category::kGrads, 5000).ok());
  // Limit 0 removes it.
  a.set_limit(Tier::kHost, 0);
  EXPECT_TRUE(a.reserve(Tier::kHost, Category::kGrads, 1).ok());
}

// Pinned memory is host memory: it counts against the host's limit, and
// has none of its own.
TEST(MemoryAccountant, PinnedMemoryCountsAgainstTheHostLimit) {
  MemoryAccountant a;
  a.set_limit(Tier::kHost, 1000);
  ASSERT_TRUE(a.reserve(Tier::kPinned, Category::kOptimizer, 700).ok());
  const absl::Status s = a.reserve(Tier::kHost, Category::kParams, 301);
  EXPECT_EQ(s.message(),
            "allocating 301 bytes of params on host would exceed the host memory limit of 1000 bytes "
            "(pinned memory included; 700 bytes in use: optimizer 700)");
  ASSERT_TRUE(a.reserve(Tier::kHost, Category::kParams, 300).ok());
  const absl::Status pinned = a.check(Tier::kPinned, Category::kGrads, 1);
  EXPECT_EQ(pinned.message(),
            "allocating 1 bytes of grads on pinned would exceed the host memory limit of 1000 bytes "
            "(pinned memory included; 1000 bytes in use: params 300, optimizer 700)");
  EXPECT_EQ(a.current_total(Tier::kPinned), 700u);  // nothing recorded by the refusals
  EXPECT_EQ(a.current_total(Tier::kHost), 300u);
  // The GPU's memory is apart.
  a.set_limit(Tier::kGpu, 10);
  EXPECT_TRUE(a.reserve(Tier::kGpu, Category::kParams, 10).ok());
  a.set_limit(Tier::kHost, 0);
  EXPECT_TRUE(a.reserve(Tier::kPinned, Category::kGrads, 1 << 20).ok());
}

// ================================================================ NodeMemory

// The node's memory is the physical memory, or less under a memory cgroup's
// limit, its own or one above it, in either version's files; "no limit"
// values and files that say nothing readable leave it as it is.
class NodeMemoryTest : public testing::TempDirTest {
 protected:
  void limit(const std::string& dir, const std::string& file, const std::string& text) {
    std::filesystem::create_directories(path(dir));
    write(dir + "/" + file, text);
  }
};

TEST_F(NodeMemoryTest, IsThePhysicalMemoryOrACgroupsLimit) {
  const std::string root = path("cg");
  NodeMemory m = node_memory(1000, "", root);
  EXPECT_EQ(m.bytes, 1000u);
  EXPECT_EQ(m.what, "physical memory");
  // v2: the cgroup's own says "max", its parent 700, the root nothing.
  limit("cg/a/b", "memory.max", "max\n");
  limit("cg/a", "memory.max", "700\n");
  m = node_memory(1000, "0::/a/b\n", root);
  EXPECT_EQ(m.bytes, 700u);
  EXPECT_EQ(m.what, "the limit of cgroup /a");
  EXPECT_EQ(node_memory(0, "0::/a/b\n", root).bytes, 700u);  // physical memory unknown
  EXPECT_EQ(node_memory(500, "0::/a/b\n", root).bytes, 500u);
  // v1: the memory controller's own hierarchy, alone or with others; v1's
  // "no limit" is past any machine's memory.
  limit("cg/memory/x/y", "memory.limit_in_bytes", "9223372036854771712\n");
  limit("cg/memory/x", "memory.limit_in_bytes", "600");
  m = node_memory(1000, "9:name=systemd:/\n4:memory:/x/y\n0::/\n", root);
  EXPECT_EQ(m.bytes, 600u);
  EXPECT_EQ(m.what, "the limit of cgroup /x");
  EXPECT_EQ(node_memory(1000, "2:cpu,memory:/x\n", root).bytes, 600u);
  EXPECT_EQ(node_memory(1000, "2:cpu,cpuacct:/x\n", root).bytes, 1000u);  // not the memory controller
  limit("cg/memory", "memory.limit_in_bytes", "400");                      // the hierarchy's root
  EXPECT_EQ(node_memory(1000, "4:memory:/x/y\n", root).bytes, 400u);
  // What says nothing readable is passed over.
  limit("cg/junk", "memory.max", "lots");
  EXPECT_EQ(node_memory(1000, "0::/junk\nnot a line\n4:memory\n", root).bytes, 1000u);
  // This machine's own is known, and no more than its physical memory.
  const NodeMemory here = node_memory();
  EXPECT_GT(here.bytes, 0u);
  EXPECT_LE(here.bytes, static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
}

// ================================================================ Buffer

TEST(Buffer, HostBytesAreAccountedForItsLifetime) {
  MemoryAccountant a;
  {
    auto b = Buffer::allocate(1000, Category::kParams, Tier::kHost, a);
    ASSERT_TRUE(b.ok()) << std::string(b.status().message());
    EXPECT_EQ(b->bytes(), 1000u);
    EXPECT_EQ(b->tier(), Tier::kHost);
    EXPECT_EQ(b->category(), Category::kParams);
    ASSERT_NE(b->data(), nullptr);
    std::memset(b->data(), 0xab, 1000);  // usable memory
    EXPECT_EQ(b->host<uint8_t>()[999], 0xab);
    EXPECT_EQ(a.current(Tier::kHost, Category::kParams), 1000u);
  }
  EXPECT_EQ(a.current(Tier::kHost, Category::kParams), 0u);
  EXPECT_EQ(a.peak(Tier::kHost, Category::kParams), 1000u);
}

TEST(Buffer, MoveTransfersTheAccounting) {
  MemoryAccountant a;
  auto b1 = Buffer::allocate(256, Category::kGrads, Tier::kHost, a);
  ASSERT_TRUE(b1.ok());
  void* data = b1->data();
  {
    Buffer b2 = std::move(*b1);
    EXPECT_EQ(b2.data(), data);
    EXPECT_EQ(b2.bytes(), 256u);
    EXPECT_EQ(b1->data(), nullptr);
    EXPECT_EQ(b1->bytes(), 0u);
    EXPECT_EQ(a.current(Tier::kHost, Category::kGrads), 256u);
    b1->reset();  // the moved-from buffer releases nothing
    EXPECT_EQ(a.current(Tier::kHost, Category::kGrads), 256u);

    // Move-assigning over a live buffer releases the old allocation.
    auto b3 = Buffer::allocate(100, Category::kGrads, Tier::kHost, a);
    ASSERT_TRUE(b3.ok());
    EXPECT_EQ(a.current(Tier::kHost, Category::kGrads), 356u);
    b2 = std::move(*b3);
    EXPECT_EQ(b2.bytes(), 100u);
    EXPECT_EQ(a.current(Tier::kHost, Category::kGrads), 100u);
  }
  EXPECT_EQ(a.current(Tier::kHost, Category::kGrads), 0u);
  EXPECT_EQ(a.peak(Tier::kHost, Category::kGrads), 356u);
}

TEST(Buffer, HostDataIs64ByteAligned) {
  MemoryAccountant a;
  std::vector<Buffer> keep;
  for (uint64_t n : {1, 3, 63, 64, 65, 1000, 4097}) {
    auto b = Buffer::allocate(n, Category::kWorkspace, Tier::kHost, a);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u) << n;
    keep.push_back(std::move(*b));
  }
  EXPECT_EQ(a.current(Tier::kHost, Category::kWorkspace), 1u + 3 + 63 + 64 + 65 + 1000 + 4097);
  keep.clear();
  EXPECT_EQ(a.current(Tier::kHost, Category::kWorkspace), 0u);
}

TEST(Buffer, GpuAndPinnedNeedACudaDevice) {
  for (Tier t : {Tier::kGpu, Tier::kPinned}) {
    MemoryAccountant a;
    {
      auto b = Buffer::allocate(4096, Category::kParams, t, a);
      if (cuda_device_count() > 0) {
        // With a device the buffer is real and accounted while it lives.
        ASSERT_TRUE(b.ok()) << tier_name(t) << ": " << b.status();
        EXPECT_EQ(a.current(t, Category::kParams), 4096u) << tier_name(t);
        continue;
      }
      EXPECT_FALSE(b.ok()) << tier_name(t);
    }
    EXPECT_EQ(a.current(t, Category::kParams), 0u) << tier_name(t);
    EXPECT_EQ(a.current_total(t), 0u) << tier_name(t);
    // A failed allocation is not a peak either (it never existed).
    EXPECT_EQ(a.peak(t, Category::kParams), 0u) << tier_name(t);
    EXPECT_EQ(a.peak_total(t), 0u) << tier_name(t);
  }
}

TEST(Memory, ParallelFillAndCopyAreMemsetAndMemcpy) {
  // Past the 8 parts that go to the threads, and a tail that is no whole part.
  const uint64_t n = (uint64_t{9} << 20) + 12345;
  std::vector<uint8_t> got(n + 2, 7), want(n + 2, 7);
  parallel_fill(got.data() + 1, 0xAB, n);
  std::memset(want.data() + 1, 0xAB, n);
  EXPECT_EQ(got, want);  // the bytes either side untouched too
  std::vector<uint8_t> src(n), dst(n, 0);
  for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  parallel_copy(dst.data(), src.data(), n);
  EXPECT_EQ(dst, src);
}

TEST(Buffer, FreedGpuAndPinnedBuffersAreReleased) {
  // Holds with or without a device: whatever was accounted is given back.
  MemoryAccountant a;
  for (Tier t : {Tier::kGpu, Tier::kPinned}) {
    { auto b = Buffer::allocate(4096, Category::kParams, t, a); }
    EXPECT_EQ(a.current_total(t), 0u) << tier_name(t);
  }
}

TEST(Buffer, NvmeIsNotAllocated) {
  MemoryAccountant a;
  auto b = Buffer::allocate(64, Category::kOffload, Tier::kNvme, a);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.current_total(Tier::kNvme), 0u);
}

TEST(Buffer, HostLimitFailsCleanly) {
  MemoryAccountant a;
  a.set_limit(Tier::kHost, 1024);
  auto ok = Buffer::allocate(1000, Category::kParams, Tier::kHost, a);
  ASSERT_TRUE(ok.ok());
  auto b = Buffer::allocate(100, Category::kActivations, Tier::kHost, a);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(b.status().message()).find("host"), std::string::npos);
  EXPECT_EQ(a.current(Tier::kHost, Category::kActivations), 0u);
  EXPECT_EQ(a.peak(Tier::kHost, Category::kActivations), 0u);
  EXPECT_EQ(a.current_total(Tier::kHost), 1000u);
  EXPECT_EQ(a.peak_total(Tier::kHost), 1000u);
}

// ================================================================ parse_byte_size

TEST(ByteSize, Parses) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"4096", 4096},
      {"0", 0},
      {"1KiB", 1024},
      {"1.5 MiB", 1572864},  // 1.5 * 2^20
      {"512MiB", 536870912},
      {"12GiB", 12884901888ull},
      {"2GB", 2000000000ull},
      {"1.5GB", 1500000000ull},
      {"3KB", 3000},
      {"1TiB", 1099511627776ull},
      {"100B", 100},
      {" 64 ", 64},
  };
  for (const auto& [text, bytes] : cases) {
    auto r = parse_byte_size(text);
    ASSERT_TRUE(r.ok()) << text << ": " << std::string(r.status().message());
    EXPECT_EQ(*r, bytes) << text;
  }
}

TEST(ByteSize, Rejects) {
  for (const char* bad : {"", "abc", "-5", "5 XB", "KiB", "12 potatoes", "-1GiB", "nan", "inf"}) {
    auto r = parse_byte_size(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
}

TEST(ByteSize, RejectsSizesPastUint64) {
  // 1e20 bytes (and 2^64 EiB-scale TiB counts) do not fit in a uint64_t.
  for (const char* bad : {"1e20", "20000000TiB"}) {
    auto r = parse_byte_size(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' parsed as " << (r.ok() ? *r : 0);
  }
}

}  // namespace
}  // namespace zerod
