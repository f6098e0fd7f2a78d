// SwiGLU, the Llama family's MLP activation, over rows of [gate | up]:
//   forward:  y = silu(g) u, silu(g) = g sigmoid(g)          ([N, 2F] -> [N, F])
//   backward: dg = dy u sigmoid(g) (1 + g (1 - sigmoid(g))), du = dy silu(g)
// Memory-bound, an element a thread: the forward reads 2F and writes F a
// row, the backward reads 3F and writes 2F.
//
// One body for both tables: the CPU's (swiglu.cc) over its cores, the
// CUDA table's (swiglu.cuh) over its grid.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"

namespace zerod {
namespace cpu {

// inp is [N, 2F], each row gate then up; out [N, F]. dinp [N, 2F] overwritten.
void swiglu_forward(float* out, const float* inp, int64_t N, int F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int F);

}  // namespace cpu

namespace cuda {

// SwiGLU of a row of [gate | up], 2F wide: out[i] = silu(gate[i]) up[i],
// silu(g) = g sigmoid(g). Element j of the [N, F] output; the backward
// writes both of its inputs' gradients.
ZD_HD float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }
template <class O, class X>
ZD_HD void swiglu_at(int64_t j, O out, X inp, int F) {
  const int64_t n = j / F, i = j % F;
  const float g = inp[n * 2 * F + i], u = inp[n * 2 * F + F + i];
  out[j] = g * sigmoid(g) * u;
}
template <class O, class X, class D>
ZD_HD void swiglu_backward_at(int64_t j, O dinp, X inp, D dout, int F) {
  const int64_t n = j / F, i = j % F;
  const float g = inp[n * 2 * F + i], u = inp[n * 2 * F + F + i], dy = dout[j];
  const float sg = sigmoid(g);
  dinp[n * 2 * F + i] = dy * u * sg * (1.0f + g * (1.0f - sg));
  dinp[n * 2 * F + F + i] = dy * g * sg;
}

}  // namespace cuda
}  // namespace zerod
