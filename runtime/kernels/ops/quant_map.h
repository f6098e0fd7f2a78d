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
  // |x|, thr[t] being the edge between magnitudes t and t+1 (+inf after the
  // last): the nearest code. Between groups the edge is the fp32 midpoint
  // (m_t + m_{t+1}) * 0.5f; inside a group it is where the kernels' cell
  // position (below) crosses an integer, which build_map finds and requires
  // within kEdgeTolerance steps of that midpoint.
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

  // Quantization works on s = 2|x|: s > m_t + m_{t+1} is exactly
  // |x| > (m_t + m_{t+1}) * 0.5f, with no halving. The group of s: its binary
  // octave e = exponent - kOctaveBase (floored at 0; s <= 2 keeps it under
  // 32) holds at most one group boundary, so group = oct_group[e] +
  // (s > oct_bound[e]). Within the group the code is
  // min(trunc(fma(s, g_cell_mul, g_cell_add)), g_code_last): the position of
  // |x| in steps from the lower cell edge of the group's first value (cells
  // of one step, centred on the values), plus that value's code. Single-value
  // groups have g_cell_mul = 0. For a negative x the code r of |x| becomes
  // max(2 * zero - r, 0) (max_neg_mag is zero).
  static constexpr int32_t kOctaveBase = 127 - 24;  // 2^-24: below every boundary
  static constexpr float kEdgeTolerance = 1.0f / 16384;
  alignas(64) std::array<int32_t, 32> oct_group{};
  alignas(64) std::array<float, 32> oct_bound{};
  alignas(64) std::array<float, 16> g_cell_mul{}, g_cell_add{};
  alignas(64) std::array<int32_t, 16> g_code_last{};

  // The codes as four byte planes, for byte-table lookups (VBMI): byte b of
  // code[k] is code_planes[256 * b + k].
  alignas(64) std::array<uint8_t, 1024> code_planes{};
};

const QuantMap& signed_dynamic_map();
const QuantMap& unsigned_dynamic_map();

// The 256 codes, ascending.
std::array<float, 256> dynamic_map_values(bool is_signed);

}  // namespace zerod
