#include "runtime/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace zerod {
namespace {

// Fraction of warmup done at `it`: log(it + 1) / log(W) or it / W, with
// DeepSpeed's floor of two warmup steps.
double warmup_fraction(const SchedulerConfig& s, int64_t it) {
  const double w = static_cast<double>(std::max<int64_t>(2, s.warmup_num_steps));
  if (s.warmup_type == WarmupType::kLog) return std::log(static_cast<double>(it) + 1.0) / std::log(w);
  return static_cast<double>(it) / w;
}

}  // namespace

double lr_at(const SchedulerConfig& s, double base_lr, int64_t it) {
  const int64_t warm = std::max<int64_t>(2, s.warmup_num_steps);
  const double delta = s.warmup_max_lr - s.warmup_min_lr;
  switch (s.type) {
    case SchedulerType::kNone:
      return base_lr;
    case SchedulerType::kWarmupLR:
      return s.warmup_min_lr + delta * (it < warm ? warmup_fraction(s, it) : 1.0);
    case SchedulerType::kWarmupDecayLR: {
      if (it < warm) return s.warmup_min_lr + delta * warmup_fraction(s, it);
      const double left = static_cast<double>(s.total_num_steps - it);
      const double span = std::max<double>(1.0, static_cast<double>(s.total_num_steps - warm));
      return s.warmup_min_lr + delta * std::max(0.0, left / span);
    }
    case SchedulerType::kWarmupCosineLR: {
      if (it < warm) {
        return base_lr * (s.warmup_min_ratio + (1.0 - s.warmup_min_ratio) * warmup_fraction(s, it));
      }
      const double done = static_cast<double>(it - warm + 1);
      const double span = static_cast<double>(std::max<int64_t>(1, s.total_num_steps - warm));
      const double cosine = (1.0 + std::cos(M_PI * done / span)) / 2.0;
      return base_lr * std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
    }
  }
  return base_lr;
}

}  // namespace zerod
