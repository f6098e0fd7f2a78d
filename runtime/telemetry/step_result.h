// What one optimizer step reports.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/memory.h"

namespace zerod {

struct StepResult {
  int64_t step = 0;      // optimizer steps attempted so far (1-based)
  double loss = 0;       // mean loss over the global batch
  double lr = 0;         // learning rate applied (of the last applied update when skipped)
  double grad_norm = 0;  // global gradient norm before clipping (unscaled); inf on overflow
  double loss_scale = 1;
  bool skipped = false;  // fp16 overflow: no update
};

// What a step reports beside its StepResult.
struct StepFigures {
  double tokens_per_s = 0;  // over the run's steps so far, as the step line's
  // Model FLOPs a second over the device's peak; absent where the peak is
  // not known.
  std::optional<double> mfu;
  std::array<uint64_t, kNumTiers> memory{};  // rank 0's bytes in use, by tier
  // The step's parts in ms (wall_clock_breakdown), by sanitized name.
  std::vector<std::pair<std::string, double>> breakdown_ms;
};

}  // namespace zerod
