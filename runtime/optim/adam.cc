#include "runtime/optim/adam.h"

#include <cmath>

namespace zerod {

void adam_step(float* params, const float* grads, float* m, float* v, int64_t n, const AdamHyper& h, float lr,
               int64_t step, float grad_scale, bool decay) {
  const float b1 = h.beta1, b2 = h.beta2;
  const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b1), static_cast<double>(step)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b2), static_cast<double>(step)));
  const float step_size = lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float wd = decay ? h.weight_decay : 0.0f;
  const float l2 = h.decoupled ? 0.0f : wd;
  const float shrink = h.decoupled ? 1.0f - lr * wd : 1.0f;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale + l2 * params[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + h.eps;
    params[i] = params[i] * shrink - step_size * mi / denom;
  }
}

}  // namespace zerod
