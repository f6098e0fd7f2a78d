// Dynamic ("dynamic tree") quantization maps for 8-bit optimizer states,
// built from their definition (Dettmers et al.): for decade d = 0..6 the
// midpoints of n_d + 1 evenly spaced points in [0.1, 1], times 10^(d-6), plus
// 0 and 1.0. The signed map (for m) takes n_d = 2^d and both signs: 127 values
// per sign (-1.0 is absent). The unsigned map (for v) takes n_d = 2^(d+1):
// 254 values. 256 codes each.
//
// A decade's values are evenly spaced, so its j-th is one fma in fp32:
// off_d + j * step_d. That expression is the definition of the fp32 codes
// (within an ulp of the exact decimal values), and it lets the kernels find
// and expand codes with arithmetic instead of table lookups.
#pragma once

#include <array>
#include <cstdint>

namespace zerod {

struct QuantMap {
  bool is_signed;
  std::array<float, 256> code;  // ascending
  int32_t zero;                 // index of 0.0f in code

  // Codes by magnitude: magnitude t stands for code[zero + t] (code[zero - t]
  // for a negative value). Rounding rule: t = how many of thr[] lie below
  // |x|, thr[t] being the fp32 midpoint (m_t + m_{t+1}) * 0.5f of magnitudes t
  // and t+1 (+inf after the last): the nearest code, ties to the smaller.
  int32_t num_mag;
  int32_t max_neg_mag;  // the largest t a negative value may take
  std::array<float, 256> thr;

  // Magnitudes form 9 groups: 0, the seven decades, 1.0. Magnitude t in
  // group g is fma(t - base[g], step[g], off[g]).
  static constexpr int kGroups = 9;
  alignas(64) std::array<float, 16> g_off{}, g_step{};
  alignas(64) std::array<int32_t, 16> g_base{}, g_last{};  // first t of the group, count - 1

  // Dequantization. The group of magnitude t is the fp32 exponent of
  // u = t + t_shift less 127 - g_shift, floored at 0: the bases are powers
  // of two (or 0) less t_shift, so t - base[g] is u less its leading power
  // of two, which is u with the mantissa bits cleared.
  int32_t t_shift, g_shift;

  // Quantization works on s = 2|x|: s > m_t + m_{t+1} is exactly |x| > thr[t],
  // with no halving. The group of s: its binary octave e = exponent -
  // kOctaveBase (floored at 0; s <= 2 keeps it under 32) holds at most one
  // group boundary, so group = oct_group[e] + (s > oct_bound[e]). Within the
  // group, u = fma(s, g_cell_mul, g_cell_add) is |x|'s position in steps from
  // the group's lower cell edge: value j's cell is [j, j + 1), its edges
  // halfway to the neighbours. Unless u lies within kEdgeMargin of an edge,
  // trunc(u) capped at g_last is the nearest value (build_map proves this
  // for every edge). Near an edge the kernels decide exactly: from
  // trunc(u - 0.5), the value just below |x| (0 below the first), one test
  // against the fp32 threshold above it. Single-value groups have u = 0.5.
  // Index j's code is r = g_code_pos[g] + j, or for a negative x
  // max(2 * zero - r, 0) (max_neg_mag is zero).
  static constexpr int32_t kOctaveBase = 127 - 24;  // 2^-24: below every boundary
  static constexpr float kEdgeMargin = 1.0f / 2048;
  alignas(64) std::array<int32_t, 32> oct_group{};
  alignas(64) std::array<float, 32> oct_bound{};
  alignas(64) std::array<float, 16> g_cell_mul{}, g_cell_add{};
  alignas(64) std::array<int32_t, 16> g_code_pos{};
};

const QuantMap& signed_dynamic_map();
const QuantMap& unsigned_dynamic_map();

// The 256 codes, ascending.
std::array<float, 256> dynamic_map_values(bool is_signed);

}  // namespace zerod
