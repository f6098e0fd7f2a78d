// NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023): frozen
// weights as 4-bit codes of 16 values that are quantiles of N(0, 1) scaled
// to [-1, 1] (8 positive, 7 negative and an exact 0), in blocks of
// kNf4Block weights that share an absmax. The absmax values are quantized in
// turn (double quantization): less their mean, as 8-bit codes of the signed
// dynamic map in groups of kQuantBlock blocks, each group with an fp32
// absmax of its own. A weight then costs 4 + 8/64 + 32/(64 * 256) = 4.127
// bits. Codes are found with the exact absmax; dequantization uses the
// double-quantized one, so its error is part of the round trip's.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/kernels/ops/hd.h"

namespace zerod {

inline constexpr int64_t kNf4Block = 64;

// The 16 values, ascending, built from the normal quantiles (nf4.cc).
const std::array<float, 16>& nf4_values();
// The code of the value 0.
inline constexpr uint8_t kNf4Zero = 7;

// Where an NF4 tensor of n weights keeps its parts, and their sizes.
struct Nf4Sizes {
  int64_t code_bytes;  // (n + 1) / 2: two codes a byte
  int64_t blocks;      // of kNf4Block weights: one absmax code each
  int64_t groups;      // of kQuantBlock blocks: one fp32 absmax each
  uint64_t bytes() const { return code_bytes + blocks + 4 * groups + 4; }  // + the offset
};
Nf4Sizes nf4_sizes(int64_t n);

struct Nf4Tensor {
  uint8_t* codes;         // weight 2j in the high nibble of byte j, 2j + 1 in the low
  uint8_t* absmax_codes;  // a block's absmax less *offset, a code of signed_dynamic_map()
  float* group_absmax;    // of each group's absmax codes
  float* offset;          // one: the mean of the blocks' absmax values
  int64_t n = 0;
};

// x[i] / its block's absmax to the nearest of nf4_values() (a tie to the
// lower), then the absmax values double-quantized.
void nf4_quantize(const float* x, const Nf4Tensor& t);
// A block's absmax as dequantization uses it.
float nf4_block_absmax(const Nf4Tensor& t, int64_t block);
// x[i] = nf4_values()[code i] * its block's absmax, for the n weights.
void nf4_dequantize(const Nf4Tensor& t, float* x);
// What n weights become held in NF4: quantized and dequantized, into out
// (which may be x).
void nf4_round_trip(const float* x, int64_t n, float* out);

namespace cuda {

// The body of dequantization, weight by weight: the same two fp32
// operations as the CPU's, so the GPU's weights are its bits.
// The 16 values as a kernel argument.
struct Nf4Values {
  float v[16];
};

// Weight i: its code's value times its block's double-quantized absmax
// (`dyn`: signed_dynamic_map()).
ZD_HD float nf4_at(int64_t i, const Nf4Tensor& t, const Nf4Values& nf4, const QuantMap& dyn) {
  const int64_t b = i / kNf4Block;
  const float absmax = dyn.code[t.absmax_codes[b]] * t.group_absmax[b / kQuantBlock] + *t.offset;
  const uint8_t byte = t.codes[i / 2];
  return nf4.v[i % 2 ? byte & 15 : byte >> 4] * absmax;
}

}  // namespace cuda

}  // namespace zerod
