// The optimizer and learning-rate schedule settings of a job (CONFIG.md's
// `optimizer` and `scheduler`, with DeepSpeed's meanings and defaults).
#pragma once

#include <cstdint>

namespace zerod {

// kAdam is Adam with weight decay as L2 on the gradient (DeepSpeed's "Adam"
// with adam_w_mode false); DeepSpeed's "Adam" otherwise is kAdamW.
enum class OptimizerType { kAdamW, kAdam, kAdamW8bit };
enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;  // Adam's division of m and v by 1 - beta^step
};

// DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR parameters.
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  double warmup_min_lr = 0.0, warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  int64_t total_num_steps = 0;
  WarmupType warmup_type = WarmupType::kLog;
  double warmup_min_ratio = 0.0, cos_min_ratio = 1e-4;  // WarmupCosineLR
};

}  // namespace zerod
