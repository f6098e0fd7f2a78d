#include <algorithm>
#include <cmath>

#include "runtime/kernels/cpu/cpu_kernels.h"

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

}  // namespace zerod::cpu
