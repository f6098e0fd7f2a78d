#include "runtime/model/lora.h"

namespace zerod {

void lora_input(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const float* x, float* u, DType act) {
  k.matmul_forward(s, u, x, w.a, nullptr, d.N, d.in, w.r);
  k.scale(s, u, w.scale, d.N * w.r);
  k.round_to(s, act, u, d.N * w.r);
}

void lora_forward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const float* x, float* y, float* u,
                  float* t, DType act) {
  lora_input(k, s, d, w, x, u, act);
  k.matmul_forward(s, t, u, w.b, nullptr, d.N, w.r, d.out);
  k.add(s, y, t, d.N * d.out);
}

void lora_backward(Kernels& k, Stream& s, const LoraShape& d, const LoraWeights& w, const LoraGrads& g, const float* x,
                   const float* u, const float* dy, float* dx, float* du, float* dt) {
  k.matmul_backward(s, du, g.b, nullptr, dy, u, w.b, d.N, w.r, d.out);
  k.scale(s, du, w.scale, d.N * w.r);
  k.matmul_backward(s, dt, g.a, nullptr, du, x, w.a, d.N, d.in, w.r);
  k.add(s, dx, dt, d.N * d.in);
}

}  // namespace zerod
