#include "runtime/kernels/ops/quant_map.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

namespace zerod {
namespace {

// The tables are fixed by the definition; a broken invariant is a bug here,
// not something a caller could handle.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "quantization map invariant broken: %s\n", what);
  std::abort();
}

// Values in decade d (of 0..6).
int decade_count(bool is_signed, int d) { return is_signed ? 1 << d : 2 << d; }

// Group g's constants: 0 (g = 0), decade g - 1, 1.0 (g = 8).
void fill_groups(QuantMap& q) {
  int32_t base = 0;
  for (int g = 0; g < QuantMap::kGroups; ++g) {
    const bool decade = g >= 1 && g <= 7;
    const int n = decade ? decade_count(q.is_signed, g - 1) : 1;
    if (decade) {
      const double scale = std::pow(10.0, g - 7);
      const double step = scale * 0.9 / n;  // n cells of [0.1, 1] * scale, one value at each centre
      const double off = scale * 0.1 + step / 2;
      q.g_step[g] = static_cast<float>(step);
      q.g_off[g] = static_cast<float>(off);
      q.g_cell_mul[g] = static_cast<float>(0.5 / step);
    } else {
      q.g_off[g] = g == 0 ? 0.0f : 1.0f;
    }
    q.g_base[g] = base;
    q.g_last[g] = n - 1;
    base += n;
  }
  q.num_mag = base;  // 129 signed, 256 unsigned
}

float magnitude(const QuantMap& q, int32_t t) {
  int g = QuantMap::kGroups - 1;
  while (q.g_base[g] > t) --g;
  return std::fma(static_cast<float>(t - q.g_base[g]), q.g_step[g], q.g_off[g]);
}

int32_t group_of_index(const QuantMap& q, int32_t t) {
  const float f = static_cast<float>(t + q.t_shift);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return std::max<int32_t>(static_cast<int32_t>(bits >> 23) - 127 + q.g_shift, 0);
}

// Inside group g the edge between the codes below and at code_above is
// where the cell position (quant_map.h) reaches code_above: the largest |x|
// that stays below. It must lie within kEdgeTolerance steps of the fp32
// midpoint mid of the two values; bisection over the float bit patterns
// (ordered like the values, all positive) finds it there.
float cell_edge(const QuantMap& q, int g, int32_t code_above, float mid) {
  const auto below = [&](float a) { return std::fma(2 * a, q.g_cell_mul[g], q.g_cell_add[g]) < code_above; };
  const float reach = QuantMap::kEdgeTolerance * q.g_step[g];
  uint32_t lo = std::bit_cast<uint32_t>(mid - reach), hi = std::bit_cast<uint32_t>(mid + reach);
  require(below(std::bit_cast<float>(lo)) && !below(std::bit_cast<float>(hi)), "cell edge within the tolerance");
  while (hi - lo > 1) {
    const uint32_t at = lo + (hi - lo) / 2;
    (below(std::bit_cast<float>(at)) ? lo : hi) = at;
  }
  return std::bit_cast<float>(lo);
}

QuantMap build_map(bool is_signed) {
  QuantMap q;
  q.is_signed = is_signed;
  fill_groups(q);
  std::vector<float> mags(q.num_mag);
  for (int32_t t = 0; t < q.num_mag; ++t) mags[t] = magnitude(q, t);
  std::vector<float> codes = mags;
  if (is_signed) {
    for (int32_t t = 1; t + 1 < q.num_mag; ++t) codes.push_back(-mags[t]);  // no -1.0
  }
  require(codes.size() == 256, "256 codes");
  std::sort(codes.begin(), codes.end());
  std::copy(codes.begin(), codes.end(), q.code.begin());
  q.zero = static_cast<int32_t>(std::find(q.code.begin(), q.code.end(), 0.0f) - q.code.begin());
  q.max_neg_mag = q.zero;

  const float inf = std::numeric_limits<float>::infinity();
  q.thr.fill(inf);
  for (int32_t t = 0; t + 1 < q.num_mag; ++t) q.thr[t] = (mags[t] + mags[t + 1]) * 0.5f;

  // Base indices are 2^g - 1 (unsigned) or 2^(g-1) (signed): a power-of-two
  // exponent names the group.
  q.t_shift = is_signed ? 0 : 1;
  q.g_shift = is_signed ? 1 : 0;
  for (int32_t t = 0; t < q.num_mag; ++t) {
    const int32_t g = group_of_index(q, t);
    require(q.g_base[g] <= t && t <= q.g_base[g] + q.g_last[g], "exponent gives the group of an index");
    uint32_t bits;
    const float u = static_cast<float>(t + q.t_shift);
    std::memcpy(&bits, &u, 4);
    require(static_cast<float>(q.g_base[g] + q.t_shift) == std::bit_cast<float>(bits & 0xff800000u),
            "a group's first index is the leading power of two");
  }
  // Negative values clamp at -code[0]: only a one-value group reaches past it (1.0).
  require(!is_signed || q.max_neg_mag == q.zero, "negative clamp at the zero code");
  for (int g = 0; g < QuantMap::kGroups; ++g) {
    const int32_t first_code = q.zero + q.g_base[g], n = q.g_last[g] + 1;
    q.g_code_last[g] = first_code + q.g_last[g];
    require(!is_signed || q.g_base[g] + q.g_last[g] <= q.max_neg_mag || q.g_last[g] == 0, "negative clamp");
    // A decade's n cells span [0.1, 1] * scale, so it starts n / 9 steps
    // above 0; a single value sits mid-cell.
    const bool decade = g >= 1 && g <= 7;
    q.g_cell_add[g] = static_cast<float>((decade ? -n / 9.0 : 0.5) + first_code);
    for (int32_t k = 1; k < n; ++k) {
      const int32_t t = q.g_base[g] + k - 1;
      q.thr[t] = cell_edge(q, g, first_code + k, q.thr[t]);
    }
    // The group's smallest s must not fall below its first code.
    if (g > 0) {
      const float lowest = std::nextafter(2 * q.thr[q.g_base[g] - 1], 2.0f);
      require(std::fma(lowest, q.g_cell_mul[g], q.g_cell_add[g]) >= first_code, "group starts at its first code");
    }
  }

  // Group boundaries in s = 2|x|: twice the thresholds between one group's
  // last value and the next's first.
  for (int e = 0; e < 32; ++e) {
    const float lo = e == 0 ? 0.0f : std::ldexp(1.0f, e - 24), hi = std::ldexp(1.0f, e - 23);
    q.oct_bound[e] = inf;
    for (int g = 1; g < QuantMap::kGroups; ++g) {
      const float boundary = 2 * q.thr[q.g_base[g] - 1];
      if (boundary < lo) q.oct_group[e] = g;
      if (boundary >= lo && boundary < hi) {
        require(q.oct_bound[e] == inf, "one group boundary per octave");
        q.oct_bound[e] = boundary;
      }
    }
  }
  for (int k = 0; k < 256; ++k) {
    const uint32_t bits = std::bit_cast<uint32_t>(q.code[k]);
    for (int b = 0; b < 4; ++b) q.code_planes[256 * b + k] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return q;
}

}  // namespace

std::array<float, 256> dynamic_map_values(bool is_signed) {
  return (is_signed ? signed_dynamic_map() : unsigned_dynamic_map()).code;
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
