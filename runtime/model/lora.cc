#include "runtime/model/lora.h"

#include "runtime/kernels/ops/hd.h"

namespace zerod {

uint64_t lora_pass_seed(uint64_t run_seed, int64_t step, int micro, int rank) {
  using cuda::splitmix64;
  return splitmix64(splitmix64(splitmix64(run_seed) ^ uint64_t(step)) ^ (uint64_t(rank) << 32 | uint32_t(micro)));
}

void lora_input(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const void* x, void* u, DType act,
                const LoraDropout& drop, void* xd) {
  if (drop.p > 0) {
    k.dropout(s, xd, x, d.N * d.in, drop.p, drop.seed);
    x = xd;
  }
  k.lora_down(s, u, x, w.a, d.N, d.in, w.r, w.scale);
  round_operands(k, s, act, u, d.N * w.r);
}

void lora_forward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const void* x, void* y, void* u,
                  void* t, DType act, const LoraDropout& drop) {
  lora_input(k, s, d, w, x, u, act, drop, t);  // x' in t, read before t is written below
  k.lora_up(s, y, d.ld(), d.col0, u, w.b, d.N, w.r, d.out, t);
}

void lora_backward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const LoraGrads& g, const void* x,
                   const void* u, const void* dy, void* dx, void* du, void* dt, const LoraDropout& drop) {
  k.lora_up_backward(s, du, g.b, dy, d.ld(), d.col0, u, w.b, d.N, w.r, d.out, w.scale, dt);
  if (drop.p > 0) {
    // A's gradient from x' (made again in dt), then dx += the mask of du·Aᵀ.
    k.dropout(s, dt, x, d.N * d.in, drop.p, drop.seed);
    k.matmul_backward(s, nullptr, g.a, nullptr, du, dt, w.a, d.N, d.in, w.r);
    k.matmul_backward(s, dt, nullptr, nullptr, du, x, w.a, d.N, d.in, w.r);
    k.dropout_add(s, dx, dt, d.N * d.in, drop.p, drop.seed);
  } else {
    k.matmul_backward(s, nullptr, g.a, nullptr, du, x, w.a, d.N, d.in, w.r);
    k.lora_down_backward(s, dx, du, w.a, d.N, d.in, w.r, dt);
  }
}

}  // namespace zerod
