// Learning-rate schedules with DeepSpeed's formulas (WarmupLR, WarmupDecayLR,
// WarmupCosineLR). Optimizer step k (1-based) uses lr_at(k - 1).
#pragma once

#include <cstdint>

#include "runtime/optim/optim_config.h"

namespace zerod {

// `base_lr` is optimizer.params.lr: the constant rate without a scheduler and
// the peak that WarmupCosineLR's ratios multiply.
double lr_at(const SchedulerConfig& s, double base_lr, int64_t iteration);

}  // namespace zerod
