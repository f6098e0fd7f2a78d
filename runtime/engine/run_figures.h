// What the run monitor's figures need from the trainer and the device:
// the model FLOPs of a token, the peak they are measured against, and
// each step's share of the profiler's running totals.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/profiler.h"
#include "runtime/engine/trainer.h"

namespace zerod {

// Model FLOPs a trained token costs: forward and input gradients through
// every weight (4 N), the gradients of the weights trained (2 N_trained:
// N itself, or LoRA's adapters), and causal attention's two products
// forward and backward (6 L C T). Recomputation is not counted.
double model_flops_per_token(const Trainer& t);

// The peak MFU is taken against: a GPU's dense 16-bit peak (0 where not
// known), or on the CPU the sgemm rate measured now on the run's threads.
double run_peak_flops(const Device& device);

// Each step's time by part (wall_clock_breakdown): the host's spans by name,
// the device's work as "device_<name>", in ms, from the profiler's running
// totals since the last call.
class StepParts {
 public:
  std::vector<std::pair<std::string, double>> take(const Profiler& p);
  // The profiler's totals started again.
  void restart() { host_.clear(), device_.clear(); }

 private:
  Profiler::Totals host_, device_;
};

}  // namespace zerod
