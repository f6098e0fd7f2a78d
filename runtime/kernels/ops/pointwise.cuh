// The elementwise ops' launches (pointwise.h): a thread an element, or 16
// bytes a thread for the maps whose pointers allow it. Included by the
// CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/pointwise.h"

namespace zerod::cuda {

template <DType kT, class F>
void map_as(cudaStream_t s, const char* what, void* out, const void* a, const void* b, int64_t n, F f) {
  const int64_t vectors = vectors_for<kT>(n, out, a, b);
  launch_each(s, map_threads<kT>(n, vectors), what,
              [=] __device__(int64_t i) { map_at<kT>(i, vectors, out, a, b, f); });
}
// out = f(a, b) over n operands of type t (map_at), 16 bytes a thread
// where the pointers allow.
template <class F>
void map(cudaStream_t s, DType t, const char* what, void* out, const void* a, const void* b, int64_t n, F f) {
  for_operands(t, [&](auto k) { map_as<decltype(k)::value>(s, what, out, a, b, n, f); });
}

inline void gelu_forward(cudaStream_t s, DType t, void* out, const void* inp, int64_t n) {
  map(s, t, "gelu_forward", out, inp, nullptr, n, GeluOf{});
}
inline void gelu_backward(cudaStream_t s, DType t, void* dinp, const void* inp, const void* dout, int64_t n) {
  map(s, t, "gelu_backward", dinp, inp, dout, n, GeluGradOf{});
}
inline void residual_forward(cudaStream_t s, DType t, void* out, const void* a, const void* b, int64_t n) {
  map(s, t, "residual_forward", out, a, b, n, SumOf{});
}

inline void take_columns(cudaStream_t s, DType t, void* out, const void* x, int64_t ld, int64_t c0, int64_t N, int n) {
  const Operands o{out, t};
  const ConstOperands in_x{x, t};
  launch_each(s, N * n, "take_columns", [=] __device__(int64_t j) { take_column_at(j, o, in_x, ld, c0, n); });
}
inline void add_columns(cudaStream_t s, DType t, void* y, int64_t ld, int64_t c0, const void* x, int64_t N, int n) {
  const Operands o{y, t};
  const ConstOperands in_x{x, t};
  launch_each(s, N * n, "add_columns", [=] __device__(int64_t j) { add_column_at(j, o, in_x, ld, c0, n); });
}

inline void add(cudaStream_t s, float* dst, const float* src, int64_t n) {
  launch_each(s, n, "add", [=] __device__(int64_t i) { dst[i] = dst[i] + src[i]; });
}
inline void scale(cudaStream_t s, DType t, void* x, float a, int64_t n) {
  const Operands v{x, t};
  launch_each(s, n, "scale", [=] __device__(int64_t i) { v[i] = v[i] * a; });
}
inline void dropout(cudaStream_t s, DType t, void* y, const void* x, int64_t n, float p, uint64_t seed) {
  const Operands o{y, t};
  const ConstOperands v{x, t};
  launch_each(s, n, "dropout", [=] __device__(int64_t i) { o[i] = dropout_at(v[i], p, seed, i); });
}
// The sum in fp32, rounded once.
inline void dropout_add(cudaStream_t s, DType t, void* y, const void* x, int64_t n, float p, uint64_t seed) {
  const Operands o{y, t};
  const ConstOperands v{x, t};
  launch_each(s, n, "dropout_add", [=] __device__(int64_t i) { o[i] = o[i] + dropout_at(v[i], p, seed, i); });
}

inline void round_to(cudaStream_t s, DType t, float* x, int64_t n) {
  if (t == DType::kF32) return;
  launch_each(s, n, "round_to", [=] __device__(int64_t i) { x[i] = round_f32(t, x[i]); });
}
inline void convert_from_f32(cudaStream_t s, DType to, const float* src, void* dst, int64_t n) {
  launch_each(s, n, "convert_from_f32", [=] __device__(int64_t i) { store_f32(dst, to, i, src[i]); });
}
inline void convert_to_f32(cudaStream_t s, DType from, const void* src, float* dst, int64_t n) {
  launch_each(s, n, "convert_to_f32", [=] __device__(int64_t i) { dst[i] = load_f32(src, from, i); });
}

}  // namespace zerod::cuda
