// The elementwise ops, an element a thread:
//   gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))    (GPT-2's, tanh approximation)
//   gelu_backward: dx = gelu'(x) dy
//   residual: y = a + b;  add (fp32 gradients): y += x;  scale: x *= a
//   dropout: y = x / (1 - p) where the draw for (seed, i) is at least p, else 0;
//     dropout_add: y += that of t
//   take_columns / add_columns: a [N, n] block of columns [c0, c0 + n) of
//     rows `ld` apart, taken out of x or added into y (an adapter's share
//     of a product's output)
//   casts: fp32 rounded in place to a 16-bit type's values; to and from it
// Each reads its inputs once and writes its output once: bound by memory
// bandwidth, which the CUDA table's maps (pointwise.cuh) meet 16 bytes a
// thread.
//
// The CPU's (pointwise.cc, across cores) runs the GELU and dropout bodies
// below, so both tables compute one formula and one mask.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"

namespace zerod {
namespace cpu {

// GELU, tanh approximation. gelu_backward may run in place (dinp == dout).
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// out = a + b.
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// Columns [c0, c0 + n) of N rows `ld` apart: out [N, n] = x's; y's += t [N, n].
void take_columns(float* out, const float* x, int64_t ld, int64_t c0, int64_t N, int n);
void add_columns(float* y, int64_t ld, int64_t c0, const float* t, int64_t N, int n);
// x[i] *= a.
void scale(float* x, float a, int64_t n);
// Kernels::dropout's mask and scale; y may be x.
void dropout(float* y, const float* x, int64_t n, float p, uint64_t seed);
// y[i] += dropout(t)[i]: dropout then residual_forward's bits, in one pass.
void dropout_add(float* y, const float* t, int64_t n, float p, uint64_t seed);

}  // namespace cpu

namespace cuda {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

ZD_HD float gelu(float x) { return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x))); }

ZD_HD float gelu_grad(float x, float dout) {
  const float th = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - th * th;
  const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return grad * dout;
}

// Dropout's draw for element i under `seed`: uniform in [0, 1) at 24 bits,
// from a counter hash, so each element's mask is known alone, and a
// backward pass finds its forward's from the seed.
ZD_HD float dropout_draw(uint64_t seed, int64_t i) {
  return static_cast<float>(splitmix64(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i)) >> 40) * 0x1.0p-24f;
}

ZD_HD float dropout_at(float x, float p, uint64_t seed, int64_t i) {
  return dropout_draw(seed, i) >= p ? x / (1.0f - p) : 0.0f;
}

// Element j of [N, n] against columns [c0, c0 + n) of rows `ld` apart:
// taken out of x, or added into y (an adapter's share of a part of a
// product's output).
template <class O, class X>
ZD_HD void take_column_at(int64_t j, O out, X x, int64_t ld, int64_t c0, int n) {
  out[j] = x[j / n * ld + c0 + j % n];
}
template <class Y, class T>
ZD_HD void add_column_at(int64_t j, Y y, T t, int64_t ld, int64_t c0, int n) {
  y[j / n * ld + c0 + j % n] += t[j];
}

// The maps of the layers: f(a, b) of a map_at.
struct GeluOf {
  ZD_HD float operator()(float x, float) const { return gelu(x); }
};
struct GeluGradOf {
  ZD_HD float operator()(float x, float dout) const { return gelu_grad(x, dout); }
};
struct SumOf {
  ZD_HD float operator()(float x, float y) const { return x + y; }
};

// Elementwise maps over operands of type kT, 16 bytes a thread: out[i] =
// f(a[i]) or f(a[i], b[i]) in fp32, each element converted as
// load_f32/store_f32 convert it, so the results are the one-element path's
// bits. Thread t < vectors takes elements [t W, t W + W) by 16-byte loads
// and stores (every pointer 16-byte aligned, vectors_for says); the threads
// after it take the rest one element each.
// Whole vectors of n elements where every pointer allows them, else none.
template <DType kT>
inline int64_t vectors_for(int64_t n, const void* a, const void* b, const void* c) {
  const auto aligned = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(a) && aligned(b) && aligned(c) ? n / Lanes16<kT>::kWidth : 0;
}
// Threads for n elements of which `vectors` go 16 bytes at a time.
template <DType kT>
ZD_HD int64_t map_threads(int64_t n, int64_t vectors) {
  return vectors + (n - vectors * Lanes16<kT>::kWidth);
}

// Thread t of a map: out = f(a, b) element by element; b may be null,
// when f ignores its second argument (given 0).
template <DType kT, class F>
ZD_HD void map_at(int64_t t, int64_t vectors, void* out, const void* a, const void* b, F f) {
  using L = Lanes16<kT>;
  if (t < vectors) {
    const Bytes16 va = static_cast<const Bytes16*>(a)[t];
    Bytes16 vb{}, vo{};
    if (b) vb = static_cast<const Bytes16*>(b)[t];
    for (int k = 0; k < L::kWidth; ++k) L::set(vo, k, f(L::get(va, k), b ? L::get(vb, k) : 0.0f));
    static_cast<Bytes16*>(out)[t] = vo;
    return;
  }
  const int64_t i = vectors * L::kWidth + (t - vectors);
  store_f32(out, kT, i, f(load_f32(a, kT, i), b ? load_f32(b, kT, i) : 0.0f));
}

}  // namespace cuda
}  // namespace zerod
