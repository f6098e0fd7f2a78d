#include "runtime/optim/quant_map.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace zerod {
namespace {

// The tables are fixed by the definition; a broken invariant is a bug here,
// not something a caller could handle.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "quantization map invariant broken: %s\n", what);
  std::abort();
}

QuantMap build_map(bool is_signed) {
  QuantMap q;
  q.is_signed = is_signed;
  q.code = dynamic_map_values(is_signed);
  q.zero = static_cast<int32_t>(std::find(q.code.begin(), q.code.end(), 0.0f) - q.code.begin());
  q.num_mag = 256 - q.zero;
  q.max_neg_mag = q.zero;
  for (int t = 1; t <= q.max_neg_mag; ++t) {
    require(q.code[q.zero - t] == -q.code[q.zero + t], "negative codes mirror the positive ones");
  }
  const float inf = std::numeric_limits<float>::infinity();
  q.thr.fill(inf);
  for (int t = 0; t + 1 < q.num_mag; ++t) q.thr[t] = (q.code[q.zero + t] + q.code[q.zero + t + 1]) * 0.5f;

  q.first.resize(QuantMap::kNumBuckets);
  const auto bucket_start = [](int32_t b) {
    if (b == 0) return 0.0f;  // everything below clamps into bucket 0
    const uint32_t bits = static_cast<uint32_t>(b + QuantMap::kBucketBase) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  const float* thr_end = q.thr.data() + q.num_mag;
  for (int32_t b = 0; b < QuantMap::kNumBuckets; ++b) {
    const float lo = bucket_start(b);
    const float hi = b + 1 < QuantMap::kNumBuckets ? bucket_start(b + 1) : inf;
    const float* first = std::lower_bound(static_cast<const float*>(q.thr.data()), thr_end, lo);
    q.first[b] = static_cast<int32_t>(first - q.thr.data());
    require(first + 1 >= thr_end || first[1] >= hi || b + 1 == QuantMap::kNumBuckets,
            "at most one threshold per bucket");
  }
  return q;
}

}  // namespace

std::array<float, 256> dynamic_map_values(bool is_signed) {
  std::vector<double> v;
  for (int i = 0; i < 7; ++i) {
    const int points = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
    const double scale = std::pow(10.0, i - 6);
    for (int k = 0; k + 1 < points; ++k) {
      const double lo = 0.1 + 0.9 * k / (points - 1), hi = 0.1 + 0.9 * (k + 1) / (points - 1);
      v.push_back(scale * (lo + hi) / 2);
      if (is_signed) v.push_back(-v.back());
    }
  }
  v.push_back(0.0);
  v.push_back(1.0);
  require(v.size() == 256, "256 codes");
  std::sort(v.begin(), v.end());
  std::array<float, 256> out;
  for (int i = 0; i < 256; ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

const QuantMap& signed_dynamic_map() {
  static const QuantMap q = build_map(true);
  return q;
}

const QuantMap& unsigned_dynamic_map() {
  static const QuantMap q = build_map(false);
  return q;
}

}  // namespace zerod
