#include "runtime/kernels/ops/adam8bit.h"

#include <algorithm>
#include <cstring>

#include "runtime/kernels/ops/optim_kernels.h"

namespace zerod {
namespace {

constexpr int64_t kTileBlocks = 64;  // quantization blocks per OpenMP task

// Runs fn(first_block, last_block) over n values' blocks, in tiles over the cores.
template <class Fn>
void over_blocks(int64_t n, Fn&& fn) {
  const int64_t blocks = quant_blocks(n), tiles = (blocks + kTileBlocks - 1) / kTileBlocks;
  if (tiles <= 1) {
    fn(0, blocks);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < tiles; ++i) fn(i * kTileBlocks, std::min(blocks, (i + 1) * kTileBlocks));
}

}  // namespace

void adam8bit_zero_states(const Adam8bitTensor& t) {
  std::memset(t.m, signed_dynamic_map().zero, t.n);
  std::memset(t.v, unsigned_dynamic_map().zero, t.n);
  std::fill_n(t.m_absmax, quant_blocks(t.n), 0.0f);
  std::fill_n(t.v_absmax, quant_blocks(t.n), 0.0f);
}

void adam8bit_update(const Adam8bitTensor& t, const AdamStep& s, CpuIsa isa) {
  const OptimKernels& k = optim_kernels(isa);
  over_blocks(t.n, [&](int64_t first, int64_t last) { k.adam8bit(t, s, first, last); });
}

void quantize_blockwise(const QuantMap& map, const float* x, int64_t n, uint8_t* codes, float* absmax, CpuIsa isa) {
  const OptimKernels& k = optim_kernels(isa);
  over_blocks(n, [&](int64_t first, int64_t last) { k.quantize(map, x, n, codes, absmax, first, last); });
}

void dequantize_blockwise(const QuantMap& map, const uint8_t* codes, const float* absmax, int64_t n, float* x,
                          CpuIsa isa) {
  const OptimKernels& k = optim_kernels(isa);
  over_blocks(n, [&](int64_t first, int64_t last) { k.dequantize(map, codes, absmax, n, x, first, last); });
}

}  // namespace zerod
