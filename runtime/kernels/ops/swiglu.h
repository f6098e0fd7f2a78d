// SwiGLU, the Llama family's MLP activation, over rows of [gate | up]:
//   forward:  y = silu(g) u, silu(g) = g sigmoid(g)          ([N, 2F] -> [N, F])
//   backward: dg = dy u sigmoid(g) (1 + g (1 - sigmoid(g))), du = dy silu(g)
// Memory-bound: the forward reads 2F and writes F a row, the backward
// reads 3F and writes 2F, each element once; on the GPU 16 bytes of each
// operand a thread where F is a whole number of them (an element a thread
// else), the same bits.
//
// One body for both tables: the CPU's (swiglu.cc) over its cores, the
// CUDA table's (swiglu.cuh) over its grid.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"
#include "runtime/kernels/ops/pointwise.h"

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
ZD_HD float swiglu_of(float g, float u) { return g * sigmoid(g) * u; }
// The gradients of gate and up from dy.
struct SwigluGrad {
  float dg, du;
};
ZD_HD SwigluGrad swiglu_grad_of(float g, float u, float dy) {
  const float sg = sigmoid(g);
  return {dy * u * sg * (1.0f + g * (1.0f - sg)), dy * g * sg};
}
template <class O, class X>
ZD_HD void swiglu_at(int64_t j, O out, X inp, int F) {
  const int64_t n = j / F, i = j % F;
  out[j] = swiglu_of(inp[n * 2 * F + i], inp[n * 2 * F + F + i]);
}
template <class O, class X, class D>
ZD_HD void swiglu_backward_at(int64_t j, O dinp, X inp, D dout, int F) {
  const int64_t n = j / F, i = j % F;
  const SwigluGrad d = swiglu_grad_of(inp[n * 2 * F + i], inp[n * 2 * F + F + i], dout[j]);
  dinp[n * 2 * F + i] = d.dg;
  dinp[n * 2 * F + F + i] = d.du;
}

// 16 bytes of each operand of type kT a thread: vector t of the [N, F]
// output, its gate and up vectors F apart in their row. Where F is a whole
// number of vectors and every pointer 16-byte aligned, the vectors of
// N rows of F; else none.
template <DType kT>
inline int64_t swiglu_vectors(int64_t N, int F, const void* a, const void* b, const void* c) {
  return F % Lanes16<kT>::kWidth == 0 ? vectors_for<kT>(N * F, a, b, c) : 0;
}
template <DType kT>
ZD_HD void swiglu_vec_at(int64_t t, void* out, const void* inp, int F) {
  using L = Lanes16<kT>;
  const int64_t per_row = F / L::kWidth;
  const Bytes16* gate = static_cast<const Bytes16*>(inp) + t / per_row * 2 * per_row + t % per_row;
  const Bytes16 g = gate[0], u = gate[per_row];
  Bytes16 y;
  for (int k = 0; k < L::kWidth; ++k) L::set(y, k, swiglu_of(L::get(g, k), L::get(u, k)));
  static_cast<Bytes16*>(out)[t] = y;
}
template <DType kT>
ZD_HD void swiglu_backward_vec_at(int64_t t, void* dinp, const void* inp, const void* dout, int F) {
  using L = Lanes16<kT>;
  const int64_t per_row = F / L::kWidth, at = t / per_row * 2 * per_row + t % per_row;
  const Bytes16 g = static_cast<const Bytes16*>(inp)[at], u = static_cast<const Bytes16*>(inp)[at + per_row],
                dy = static_cast<const Bytes16*>(dout)[t];
  Bytes16 dg, du;
  for (int k = 0; k < L::kWidth; ++k) {
    const SwigluGrad d = swiglu_grad_of(L::get(g, k), L::get(u, k), L::get(dy, k));
    L::set(dg, k, d.dg);
    L::set(du, k, d.du);
  }
  static_cast<Bytes16*>(dinp)[at] = dg;
  static_cast<Bytes16*>(dinp)[at + per_row] = du;
}

}  // namespace cuda
}  // namespace zerod
