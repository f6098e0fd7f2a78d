// fp16 loss scaling with DeepSpeed's DynamicLossScaler rule: on overflow the
// step is skipped and, once hysteresis is used up, the scale halves (an error
// if it is already at the minimum); after loss_scale_window clean steps since
// the last overflow it doubles and hysteresis refills. A positive
// fp16.loss_scale fixes the scale instead.
#pragma once

#include <cstdint>

#include "runtime/config/job_config.h"
#include "runtime/core/status.h"

namespace zerod {

class LossScaler {
 public:
  explicit LossScaler(const LossScaleConfig& c);
  double scale() const { return scale_; }
  int hysteresis_left() const { return hysteresis_; }
  // Called once per optimizer step with whether its gradients overflowed.
  absl::Status update(bool overflow);

  // Everything update() changes, for checkpoints.
  struct State {
    double scale;
    int hysteresis;
    int64_t iter, last_overflow_iter;
  };
  State state() const { return {scale_, hysteresis_, iter_, last_overflow_iter_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    hysteresis_ = s.hysteresis;
    iter_ = s.iter;
    last_overflow_iter_ = s.last_overflow_iter;
  }

 private:
  LossScaleConfig cfg_;
  bool dynamic_;
  double scale_;
  int hysteresis_;
  int64_t iter_ = 0;
  int64_t last_overflow_iter_ = -1;
};

}  // namespace zerod
