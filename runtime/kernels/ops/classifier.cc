// The LM head on the CPU: OpenBLAS's products (cpu/gemm.h) and the softmax
// cross-entropy a row a thread, its sums in double (classifier.h).
#include "runtime/kernels/ops/classifier.h"

#include <algorithm>
#include <cmath>

#include "runtime/kernels/cpu/gemm.h"

namespace zerod::cpu {

void softmax_cross_entropy(float* logits, double* losses, const int32_t* targets, int64_t rows, int V, float dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* z = logits + r * V;
    if (targets[r] < 0) {  // a target the loss mask leaves out: no loss, no gradient
      losses[r] = 0.0;
      if (dloss != 0.0f) std::fill(z, z + V, 0.0f);
      continue;
    }
    const float mx = *std::max_element(z, z + V);
    double sum = 0.0;
    for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(z[i] - mx));
    const int tgt = targets[r];
    losses[r] = std::log(sum) - static_cast<double>(z[tgt] - mx);
    if (dloss == 0.0f) continue;
    const double inv = 1.0 / sum;
    for (int i = 0; i < V; ++i) {
      const float p = static_cast<float>(std::exp(static_cast<double>(z[i] - mx)) * inv);
      z[i] = (p - (i == tgt ? 1.0f : 0.0f)) * dloss;
    }
  }
}

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
    if (!dinp) continue;
    // dinp = dlogits @ wte; dwte += dlogits^T @ inp.
    sgemm(false, false, rows, C, V, 1.0f, logits, V, wte, C, 0.0f, dinp + r0 * C, C);
    if (a.dwte) sgemm(true, false, V, C, rows, 1.0f, logits, V, inp + r0 * C, C, 1.0f, a.dwte, C);
  }
}

}  // namespace zerod::cpu
