// Random inputs and float comparisons for the tests that hold one kernel
// table to another.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace zerod::testing {

inline std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ||got - ref|| / ||ref||: a model's fp32 values against a reference in double.
inline double relative_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(err / norm);
}

// The mean cross-entropy of rows of V logits against their targets, in double.
inline double mean_cross_entropy(const std::vector<double>& logits, const std::vector<int32_t>& targets, int V) {
  double total = 0;
  for (size_t n = 0; n < targets.size(); ++n) {
    const double* row = logits.data() + n * V;
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    total += std::log(sum) - (row[targets[n]] - mx);
  }
  return total / static_cast<double>(targets.size());
}

// n token ids below vocab.
inline std::vector<int32_t> random_tokens(int64_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = static_cast<int32_t>(rng() % vocab);
  return v;
}

// |got - want| <= rel * max|want| everywhere.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float m = 1e-30f;
  for (float x : want) m = std::max(m, std::fabs(x));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], rel * m) << what << " at " << i;
}

// max |got - want| / max |want|: expect_close's measure, for a test that
// must see a difference.
inline float max_rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
  float m = 1e-30f, d = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    m = std::max(m, std::fabs(want[i]));
    d = std::max(d, std::fabs(got[i] - want[i]));
  }
  return d / m;
}

// A row's statistics: the CPU sums a row of C in one fp32 chain, whose
// rounding errors walk about sqrt(C) steps of 2^-24 (the GPU's lanes and
// tree add in another order); three such walks, and never under 1e-6.
inline float row_tol(int C) { return std::max(1e-6f, 3.0f * std::sqrt(static_cast<float>(C)) * 0x1p-24f); }

// The bit patterns, so that EXPECT_EQ compares bits (NaN and -0 included).
inline std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

}  // namespace zerod::testing
