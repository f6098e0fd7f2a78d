// What one optimizer step reports.
#pragma once

#include <cstdint>

namespace zerod {

struct StepResult {
  int64_t step = 0;     // optimizer steps attempted so far (1-based)
  double loss = 0;      // mean loss over the global batch
  double lr = 0;        // learning rate applied (of the last applied update when skipped)
  double grad_norm = 0; // global gradient norm before clipping (unscaled); inf on overflow
  double loss_scale = 1;
  bool skipped = false; // fp16 overflow: no update
};

}  // namespace zerod
