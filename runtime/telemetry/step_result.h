// What one optimizer step reports.
#pragma once

#include <array>
#include <cmath>
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

// An evaluation of the held-out set (data.eval) after `step`: the mean
// loss over its `targets` counted targets.
struct EvalResult {
  int64_t step = 0;
  double loss = 0;
  int64_t targets = 0;
  double perplexity() const { return std::exp(loss); }
};

// The held-out losses of a run so far (resumed runs carry it): the lowest
// and its step, and the evaluations since without a lower one.
struct EvalRecord {
  int64_t evaluations = 0;
  double best_loss = 0;  // of evaluations > 0
  int64_t best_step = 0;
  int since_best = 0;
  // Counts r; returns whether it is the lowest so far (the first is).
  bool add(const EvalResult& r) {
    const bool best = evaluations == 0 || r.loss < best_loss;
    ++evaluations;
    if (best) {
      best_loss = r.loss;
      best_step = r.step;
      since_best = 0;
    } else {
      ++since_best;
    }
    return best;
  }
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
