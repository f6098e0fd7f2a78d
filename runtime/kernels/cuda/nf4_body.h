// The body of NF4 dequantization (cpu/nf4.h), weight by weight: the same
// two fp32 operations as the CPU's, so the GPU's weights are its bits.
#pragma once

#include "runtime/kernels/cpu/nf4.h"
#include "runtime/kernels/cuda/hd.h"

namespace zerod::cuda {

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

}  // namespace zerod::cuda
