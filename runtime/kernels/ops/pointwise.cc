// The elementwise ops on the CPU, across cores (pointwise.h).
#include "runtime/kernels/ops/pointwise.h"

namespace zerod::cpu {

// GELU by the bodies the CUDA table runs (pointwise.h): one formula.
void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = cuda::gelu(inp[i]);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = cuda::gelu_grad(inp[i], dout[i]);
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void take_columns(float* out, const float* x, int64_t ld, int64_t c0, int64_t N, int n) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * n; ++j) cuda::take_column_at(j, out, x, ld, c0, n);
}

void add_columns(float* y, int64_t ld, int64_t c0, const float* t, int64_t N, int n) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * n; ++j) cuda::add_column_at(j, y, t, ld, c0, n);
}

void scale(float* x, float a, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

void dropout(float* y, const float* x, int64_t n, float p, uint64_t seed) {
  // One definition of the mask for every table: the CUDA body's.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = cuda::dropout_at(x[i], p, seed, i);
}

void dropout_add(float* y, const float* t, int64_t n, float p, uint64_t seed) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + cuda::dropout_at(t[i], p, seed, i);
}

}  // namespace zerod::cpu
