// The training engine of one worker: model, parameters, gradients, optimizer
// states, data loader, learning-rate schedule and loss scaling.
//
// Mixed precision (bf16/fp16): working parameters and activations are 16-bit,
// gradients accumulate in fp32, and fp32 master weights live with Adam's m
// and v as optimizer state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/config/job_config.h"
#include "runtime/core/memory.h"
#include "runtime/data/dataset.h"
#include "runtime/engine/loss_scaler.h"
#include "runtime/model/gpt.h"
#include "runtime/model/weights.h"
#include "runtime/optim/adam.h"

namespace zerod {

struct StepResult {
  int64_t step = 0;     // optimizer steps attempted so far (1-based)
  double loss = 0;      // mean loss over the global batch
  double lr = 0;        // learning rate applied (of the last applied update when skipped)
  double grad_norm = 0; // global gradient norm before clipping (unscaled); inf on overflow
  double loss_scale = 1;
  bool skipped = false; // fp16 overflow: no update
};

class Trainer {
 public:
  // Loads the data and builds everything; errors here are bad input.
  static absl::StatusOr<std::unique_ptr<Trainer>> create(const JobConfig& cfg);

  // One optimizer step over gradient_accumulation_steps micro-batches.
  absl::StatusOr<StepResult> step();

  // Continues `prompt` by up to max_new tokens (greedy at temperature 0),
  // stopping after `stop` when stop >= 0.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int max_new, double temperature, int stop = -1);
  // Fraction of the synthetic task's held-out prompts answered exactly by
  // greedy decoding; -1 when the data is not synthetic.
  double synthetic_accuracy();
  // The end-of-run sample for text and synthetic data ("" for token shards).
  std::string sample_text();

  const JobConfig& config() const { return cfg_; }
  const GptLayout& layout() const { return model_->layout(); }
  int64_t num_params() const { return layout().num_params(); }
  // fp32 master weights (the parameters themselves in fp32 runs).
  const float* master_params() const { return master(); }

 private:
  explicit Trainer(const JobConfig& cfg);
  absl::Status build();
  // fp32 master weights: their own buffer in 16-bit runs, the parameters in fp32 runs.
  float* master() const { return (cfg_.precision == DType::kF32 ? params_ : master_).as<float>(); }

  JobConfig cfg_;
  Dataset data_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<Gpt> model_;
  Buffer params_;   // working parameters, precision dtype
  Buffer master_;   // fp32 master copy (16-bit runs only)
  Buffer grads_, adam_m_, adam_v_;
  Buffer inputs_, targets_;
  std::unique_ptr<FlatWeights> weights_;
  LossScaler scaler_;
  AdamHyper adam_;
  int64_t steps_ = 0;    // attempted
  int64_t updates_ = 0;  // applied
  double last_lr_ = 0;
  uint64_t sample_rng_state_;
};

}  // namespace zerod
