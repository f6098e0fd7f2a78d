#include "runtime/kernels/ops/adam.h"

#include <algorithm>
#include <cmath>

#include "runtime/kernels/ops/optim_kernels.h"

namespace zerod {
namespace {

// Elements per OpenMP task: large enough to amortise scheduling, small
// enough to spread a shard's tensors over the cores.
constexpr int64_t kTile = 16384;

}  // namespace

const OptimKernels& optim_kernels(CpuIsa isa) {
  switch (isa) {
#if defined(ZEROD_X86_KERNELS)
    case CpuIsa::kAvx512Vbmi:
      return avx512vbmi_optim_kernels();
    case CpuIsa::kAvx512:
      return avx512_optim_kernels();
    case CpuIsa::kAvx2:
      return avx2_optim_kernels();
#endif
    default:
      return scalar_optim_kernels();
  }
}

AdamStep make_adam_step(const AdamHyper& h, float lr, int64_t step, float grad_scale, bool decay) {
  // Without bias correction m and v are used as they are.
  const double bc1 = h.bias_correction ? 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(step)) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(step)) : 1.0;
  const float wd = decay ? h.weight_decay : 0.0f;
  AdamStep s;
  s.beta1 = h.beta1;
  s.beta2 = h.beta2;
  s.one_minus_beta1 = 1.0f - h.beta1;
  s.one_minus_beta2 = 1.0f - h.beta2;
  s.eps = h.eps;
  s.neg_step_size = static_cast<float>(-lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.shrink = h.decoupled ? 1.0f - lr * wd : 1.0f;
  s.l2 = h.decoupled ? 0.0f : wd;
  s.grad_scale = grad_scale;
  return s;
}

void adam_update(const AdamTensor& t, const AdamStep& s, CpuIsa isa) {
  const OptimKernels& k = optim_kernels(isa);
  const int64_t tiles = (t.n + kTile - 1) / kTile;
  if (tiles <= 1) {
    k.adam(t, s, 0, t.n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < tiles; ++i) k.adam(t, s, i * kTile, std::min(t.n, (i + 1) * kTile));
}

}  // namespace zerod
