#include <algorithm>

#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/kernels/cpu/gemm.h"

namespace zerod::cpu {

void classifier_logits(float* logits, const float* inp, int64_t inp_stride, const float* wte, int64_t rows, int C,
                       int V) {
  sgemm(false, true, rows, V, C, 1.0f, inp, inp_stride, wte, C, 0.0f, logits, V);
}

void classifier_forward_backward(const ClassifierArgs& a) {
  const int C = a.C, V = a.V;
  const float* inp = static_cast<const float*>(a.inp);
  const float* wte = static_cast<const float*>(a.wte);
  float* logits = static_cast<float*>(a.logits);
  float* dinp = static_cast<float*>(a.dinp);
  for (int64_t r0 = 0; r0 < a.N; r0 += a.chunk_rows) {
    const int64_t rows = std::min(a.chunk_rows, a.N - r0);
    classifier_logits(logits, inp + r0 * C, C, wte, rows, C, V);
    round_to(a.act, logits, rows * V);
    softmax_cross_entropy(logits, a.losses + r0, a.targets + r0, rows, V, a.dloss);
    // dinp = dlogits @ wte; dwte += dlogits^T @ inp.
    sgemm(false, false, rows, C, V, 1.0f, logits, V, wte, C, 0.0f, dinp + r0 * C, C);
    if (a.dwte) sgemm(true, false, V, C, rows, 1.0f, logits, V, inp + r0 * C, C, 1.0f, a.dwte, C);
  }
}

double sum(const double* x, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

}  // namespace zerod::cpu
