// Dynamic ("dynamic tree") quantization maps for 8-bit optimizer states,
// built from their definition (Dettmers et al.): for decade i = 0..6 the
// midpoints of n_i evenly spaced points in [0.1, 1], times 10^(i-6), plus 0
// and 1.0. The signed map (for m) takes n_i = 2^i + 1 and both signs: 127
// values per sign (-1.0 is absent). The unsigned map (for v) takes
// n_i = 2^(i+1) + 1: 254 values. 256 codes each.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace zerod {

struct QuantMap {
  bool is_signed;
  std::array<float, 256> code;  // ascending
  int32_t zero;                 // index of 0.0f in code

  // Finding the nearest code of x in [-1, 1] goes by its magnitude a = |x|:
  // magnitude t stands for code[zero + t] (code[zero - t] when x < 0), and
  // t = how many of thr[] lie below a, thr[t] being the midpoint of
  // magnitudes t and t+1 (+inf after the last). Ties go to the smaller.
  int32_t num_mag;
  int32_t max_neg_mag;  // the largest t a negative value may take
  std::array<float, 256> thr;
  // The search in one step: a's fp32 bits >> 16 (exponent and top 7
  // mantissa bits), less kBucketBase and clamped, index a bucket; first[b] is
  // how many thresholds lie below the bucket's start, and no bucket holds
  // more than one, so t = first[b] + (a > thr[first[b]]).
  static constexpr int32_t kBucketBase = (127 - 24) << 7;  // 2^-24: far below the smallest threshold
  static constexpr int32_t kNumBuckets = ((127 << 7) - kBucketBase) + 1;  // up to 1.0
  std::vector<int32_t> first;
};

const QuantMap& signed_dynamic_map();
const QuantMap& unsigned_dynamic_map();

// The 256 values of the definition, ascending, rounded to fp32.
std::array<float, 256> dynamic_map_values(bool is_signed);

}  // namespace zerod
