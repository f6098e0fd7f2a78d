#include "runtime/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace zerod {

LossScaler::LossScaler(const LossScaleConfig& c)
    : cfg_(c),
      dynamic_(c.loss_scale == 0),
      scale_(dynamic_ ? std::ldexp(1.0, c.initial_scale_power) : c.loss_scale),
      hysteresis_(c.hysteresis) {}

absl::Status LossScaler::update(bool overflow) {
  if (!dynamic_) return absl::OkStatus();
  if (overflow) {
    if (hysteresis_ == 1 || cfg_.hysteresis == 1) {
      if (scale_ <= cfg_.min_loss_scale) {
        return absl::FailedPreconditionError(absl::StrCat(
            "fp16 gradients overflowed with the loss scale already at fp16.min_loss_scale (", cfg_.min_loss_scale,
            "): training cannot continue"));
      }
      scale_ = std::max(scale_ / 2.0, cfg_.min_loss_scale);
    } else {
      --hysteresis_;
    }
    last_overflow_iter_ = iter_;
  } else {
    if (cfg_.consecutive_hysteresis) hysteresis_ = cfg_.hysteresis;
    if ((iter_ - last_overflow_iter_) % cfg_.loss_scale_window == 0) {
      if (!cfg_.consecutive_hysteresis) hysteresis_ = cfg_.hysteresis;
      scale_ *= 2.0;
    }
  }
  ++iter_;
  return absl::OkStatus();
}

}  // namespace zerod
