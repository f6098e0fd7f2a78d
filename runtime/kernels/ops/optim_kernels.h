// The optimizer kernels of one instruction set, over a range of a tensor.
// adam.cc and adam8bit.cc split tensors into tiles over the cores and call
// the table of the chosen ISA; optim_kernels_<isa>.cc fill the tables.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/adam8bit.h"

namespace zerod {

struct OptimKernels {
  // Elements [begin, end).
  void (*adam)(const AdamTensor& t, const AdamStep& s, int64_t begin, int64_t end);
  // Quantization blocks [first, last).
  void (*adam8bit)(const Adam8bitTensor& t, const AdamStep& s, int64_t first, int64_t last);
  void (*quantize)(const QuantMap& map, const float* x, int64_t n, uint8_t* codes, float* absmax, int64_t first,
                   int64_t last);
  void (*dequantize)(const QuantMap& map, const uint8_t* codes, const float* absmax, int64_t n, float* x, int64_t first,
                     int64_t last);
};

const OptimKernels& scalar_optim_kernels();
const OptimKernels& avx2_optim_kernels();
const OptimKernels& avx512_optim_kernels();
const OptimKernels& avx512vbmi_optim_kernels();
const OptimKernels& optim_kernels(CpuIsa isa);

}  // namespace zerod
