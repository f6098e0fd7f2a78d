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
  k.matmul_forward(s, u, x, w.a, nullptr, d.N, d.in, w.r);
  k.scale(s, u, w.scale, d.N * w.r);
  round_operands(k, s, act, u, d.N * w.r);
}

void lora_forward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const void* x, void* y, void* u,
                  void* t, DType act, const LoraDropout& drop) {
  lora_input(k, s, d, w, x, u, act, drop, t);  // x' in t, read before t is written below
  k.matmul_forward(s, t, u, w.b, nullptr, d.N, w.r, d.out);
  if (d.ld() == d.out) {
    k.residual_forward(s, y, y, t, d.N * d.out);
  } else {
    k.add_columns(s, y, d.ld(), d.col0, t, d.N, d.out);
  }
}

void lora_backward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const LoraGrads& g, const void* x,
                   const void* u, const void* dy, void* dx, void* du, void* dt, const LoraDropout& drop) {
  if (d.ld() != d.out) {  // this adapter's columns of dy, in dt until dy is read
    k.take_columns(s, dt, dy, d.ld(), d.col0, d.N, d.out);
    dy = dt;
  }
  k.matmul_backward(s, du, g.b, nullptr, dy, u, w.b, d.N, w.r, d.out);
  k.scale(s, du, w.scale, d.N * w.r);
  if (drop.p > 0) {
    // A's gradient from x' (made again in dt), then dt = du·Aᵀ through the mask.
    k.dropout(s, dt, x, d.N * d.in, drop.p, drop.seed);
    k.matmul_backward(s, nullptr, g.a, nullptr, du, dt, w.a, d.N, d.in, w.r);
    k.matmul_backward(s, dt, nullptr, nullptr, du, x, w.a, d.N, d.in, w.r);
    k.dropout(s, dt, dt, d.N * d.in, drop.p, drop.seed);
  } else {
    k.matmul_backward(s, dt, g.a, nullptr, du, x, w.a, d.N, d.in, w.r);
  }
  k.residual_forward(s, dx, dx, dt, d.N * d.in);
}

}  // namespace zerod
