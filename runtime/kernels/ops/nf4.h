// NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023): frozen
// weights as 4-bit codes of 16 values that are quantiles of N(0, 1) scaled
// to [-1, 1] (8 positive, 7 negative and an exact 0), in blocks of
// kNf4Block weights that share an absmax. The absmax values are quantized in
// turn (double quantization): less their mean, as 8-bit codes of the signed
// dynamic map in groups of kQuantBlock blocks, each group with an fp32
// absmax of its own. A weight then costs 4 + 8/64 + 32/(64 * 256) = 4.127
// bits, and a tensor 1 KiB more for its map. Codes are found with the exact absmax; dequantization uses the
// double-quantized one, so its error is part of the round trip's.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/kernels/ops/hd.h"

namespace zerod {

inline constexpr int64_t kNf4Block = 64;

// The 16 values, ascending, built from the normal quantiles (nf4.cc).
const std::array<float, 16>& nf4_values();
// The code of the value 0.
inline constexpr uint8_t kNf4Zero = 7;

// The 256 values zerod double-quantizes blocks' absmax values to:
// bitsandbytes' signed dynamic map (create_dynamic_map), built as torch's
// scalar linspace would. A tensor carries the map it was coded with, as a
// 4-bit model's files do (nested_quant_map): torch's vectorized linspace
// gives some values an ulp apart from machine to machine.
struct Nf4AbsmaxMap {
  float v[256];  // ascending
};
const Nf4AbsmaxMap& nf4_absmax_map();
inline constexpr int kNf4MapValues = 256;

// Where an NF4 tensor of n weights keeps its parts, and their sizes.
struct Nf4Sizes {
  int64_t code_bytes;  // (n + 1) / 2: two codes a byte
  int64_t blocks;      // of kNf4Block weights: one absmax code each
  int64_t groups;      // of kQuantBlock blocks: one fp32 absmax each
  // + the offset and the map
  uint64_t bytes() const { return code_bytes + blocks + 4 * groups + 4 + 4 * kNf4MapValues; }
};
Nf4Sizes nf4_sizes(int64_t n);

struct Nf4Tensor {
  uint8_t* codes;         // weight 2j in the high nibble of byte j, 2j + 1 in the low
  uint8_t* absmax_codes;  // a block's absmax less *offset, a code of `map`
  float* group_absmax;    // of each group's absmax codes
  float* offset;          // one: the mean of the blocks' absmax values
  float* map;             // kNf4MapValues: the absmax codes' values
  int64_t n = 0;
};

// An NF4 tensor of n weights in host memory of its own.
struct Nf4HostTensor {
  explicit Nf4HostTensor(int64_t n);
  Nf4HostTensor(const Nf4HostTensor&) = delete;
  Nf4HostTensor& operator=(const Nf4HostTensor&) = delete;
  std::vector<uint8_t> codes, absmax_codes;
  std::vector<float> floats;  // the groups' absmax values, the offset, the map
  Nf4Tensor t;
};

// x[i] / its block's absmax to the nearest of nf4_values() (a tie to the
// lower), then the absmax values double-quantized with nf4_absmax_map(),
// which t.map is given.
void nf4_quantize(const float* x, const Nf4Tensor& t);
// A block's absmax as dequantization uses it.
float nf4_block_absmax(const Nf4Tensor& t, int64_t block);
// x[i] = nf4_values()[code i] * its block's absmax, for the n weights.
void nf4_dequantize(const Nf4Tensor& t, float* x);

// A linear layer's weight is held as transformers holds it and bitsandbytes
// quantizes it: [rows, cols] = [out, in], row-major, so that blocks run
// along rows. A product takes its transpose: out[c * ld + r] = weight
// (r, c), for the rows x cols weights of t.
void nf4_dequantize_transposed(const Nf4Tensor& t, int64_t rows, int64_t cols, int64_t ld, float* out);
// Its inverse: nf4_quantize of the weight [t.n / cols, cols] read in place
// from its product's operands, weight (r, c) at w[c * ld + r].
void nf4_quantize_transposed(const float* w, int64_t cols, int64_t ld, const Nf4Tensor& t);

// A transposed dequantization's shape, and its grid on the device: a
// thread a run of kNf4Run weights of a row. Where cols is a multiple of
// kNf4Run, a run lies in one block and its codes are 8 aligned bytes. A
// 256-thread block takes 64 rows by 4 runs (each row's 32-byte sector of
// codes), rows fastest, so that each store of a warp is 32 neighbouring
// operands of one column.
inline constexpr int kNf4Run = 16;
struct Nf4Transpose {
  int64_t rows, cols, ld;
  ZD_HD int64_t runs() const { return (cols + kNf4Run - 1) / kNf4Run; }
  ZD_HD int64_t row_tiles() const { return (rows + 63) / 64; }
  ZD_HD int64_t threads() const { return row_tiles() * ((runs() + 3) / 4) * 256; }
};

// What n weights become held in NF4: quantized and dequantized, into out
// (which may be x).
void nf4_round_trip(const float* x, int64_t n, float* out);

namespace cuda {

// The bodies of dequantization: the same fp32 operations as the CPU's (and
// bitsandbytes'), so the GPU's weights are its bits. The 16 values as a
// kernel argument.
struct Nf4Values {
  float v[16];
};

// Block b's double-quantized absmax.
ZD_HD float nf4_absmax_at(int64_t b, const Nf4Tensor& t) {
  return t.map[t.absmax_codes[b]] * t.group_absmax[b / kQuantBlock] + *t.offset;
}

// Weight i: its code's value times its block's absmax.
ZD_HD float nf4_at(int64_t i, const Nf4Tensor& t, const Nf4Values& nf4) {
  const uint8_t byte = t.codes[i / 2];
  return nf4.v[i % 2 ? byte & 15 : byte >> 4] * nf4_absmax_at(i / kNf4Block, t);
}

// Thread k's run, written to `out` (operands of type kT) as kT's rounding of
// nf4_at's value. On the device a code's value comes from the lane of that
// number, which holds it (a table indexed at run time would sit in local
// memory), so every lane of a warp takes part, those past the matrix on
// row 0's codes, storing nothing.
template <DType kT>
ZD_HD void nf4_transposed_run(int64_t k, const Nf4Tensor& t, const Nf4Transpose& d, const Nf4Values& nf4,
                              void* out) {
  const int64_t tile = k / 256, lane = k % 256;
  int64_t r = tile % d.row_tiles() * 64 + lane % 64, run = tile / d.row_tiles() * 4 + lane / 64;
  if (d.cols % kNf4Run != 0) {  // a run may cross blocks: weight by weight
    for (int64_t c = run * kNf4Run; r < d.rows && c < (run + 1) * kNf4Run && c < d.cols; ++c) {
      store_f32(out, kT, c * d.ld + r, nf4_at(r * d.cols + c, t, nf4));
    }
    return;
  }
  const bool inside = r < d.rows && run < d.runs();
  if (!inside) r = run = 0;
  const int64_t c0 = run * kNf4Run, first = r * d.cols + c0;
  const float absmax = nf4_absmax_at(first / kNf4Block, t);
  uint32_t w[2];
#ifdef __CUDA_ARCH__
  const float held = nf4.v[k % 16];
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(t.codes + first / 2));
  w[0] = v.x;
  w[1] = v.y;
  const auto value = [held](uint32_t code) { return __shfl_sync(0xffffffffu, held, static_cast<int>(code)); };
#else
  std::memcpy(w, t.codes + first / 2, 8);
  const auto value = [&nf4](uint32_t code) { return nf4.v[code]; };
#endif
  ZD_UNROLL
  for (int j = 0; j < kNf4Run / 2; ++j) {
    const uint32_t byte = w[j / 4] >> (8 * (j % 4)) & 255;  // little-endian: the run's byte j
    const float hi = value(byte >> 4) * absmax, lo = value(byte & 15) * absmax;
    if (inside) {
      store_f32(out, kT, (c0 + 2 * j) * d.ld + r, hi);
      store_f32(out, kT, (c0 + 2 * j + 1) * d.ld + r, lo);
    }
  }
}

}  // namespace cuda

}  // namespace zerod
