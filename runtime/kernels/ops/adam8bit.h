// 8-bit AdamW: m and v stored as bytes indexing dynamic quantization maps,
// in blocks of kQuantBlock values that share one fp32 absmax. Each step
// dequantizes a block, runs the fp32 update of adam.h, takes the block's new
// absmax and requantizes to the nearest code, all in one pass over memory.
// About 2.03 bytes of state per parameter instead of 8.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/adam.h"
#include "runtime/kernels/ops/quant_map.h"

namespace zerod {

inline constexpr int64_t kQuantBlock = 256;
// Tensors smaller than this keep fp32 states (their bytes do not matter and
// their statistics are the least smooth).
inline constexpr int64_t kMin8bitNumel = 4096;

inline int64_t quant_blocks(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

struct Adam8bitTensor {
  float* param;     // fp32 master weights
  uint8_t* m;       // codes of signed_dynamic_map()
  uint8_t* v;       // codes of unsigned_dynamic_map()
  float* m_absmax;  // quant_blocks(n) each
  float* v_absmax;
  const void* grad;
  DType grad_type = DType::kF32;
  void* param16 = nullptr;
  DType param16_type = DType::kBF16;
  int64_t n = 0;
};

// Zero states: every code the map's 0, every absmax 0.
void adam8bit_zero_states(const Adam8bitTensor& t);
void adam8bit_update(const Adam8bitTensor& t, const AdamStep& s, CpuIsa isa = best_cpu_isa());

// Blockwise quantization on its own (the optimizer's own rounding): x[i] /
// absmax of its block to the nearest code.
void quantize_blockwise(const QuantMap& map, const float* x, int64_t n, uint8_t* codes, float* absmax,
                        CpuIsa isa = best_cpu_isa());
void dequantize_blockwise(const QuantMap& map, const uint8_t* codes, const float* absmax, int64_t n, float* x,
                          CpuIsa isa = best_cpu_isa());

}  // namespace zerod
