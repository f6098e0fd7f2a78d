// The training engine of one worker: model, data loader, learning-rate
// schedule and loss scaling, with parameters, gradients and optimizer states
// held (and sharded across ranks) by the ZeRO engine.
//
// Mixed precision (bf16/fp16): working parameters and activations are 16-bit,
// gradients accumulate in fp32, and fp32 master weights live with Adam's m
// and v (fp32, or 8-bit with AdamW8bit) as optimizer state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/config/job_config.h"
#include "runtime/core/memory.h"
#include "runtime/data/dataset.h"
#include "runtime/engine/loss_scaler.h"
#include "runtime/model/gpt.h"
#include "shard/zero_engine.h"

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
  // Loads the data and builds everything; errors here are bad input. Every
  // rank of `comm` (a world of one when null) builds its own trainer, and
  // from then on all of them call the same methods in the same order.
  static absl::StatusOr<std::unique_ptr<Trainer>> create(const JobConfig& cfg, Communicator* comm = nullptr);

  // One optimizer step over gradient_accumulation_steps micro-batches of
  // this rank's part of the global batch.
  absl::StatusOr<StepResult> step();

  // Continues `prompt` by exactly max_new tokens (greedy at temperature 0),
  // cut after the first `stop` when stop >= 0. The number of model calls
  // depends only on max_new, so ranks stay in step under ZeRO-3.
  absl::StatusOr<std::vector<int32_t>> generate(const std::vector<int32_t>& prompt, int max_new, double temperature,
                                                int stop = -1);
  // Fraction of the synthetic task's held-out prompts answered exactly by
  // greedy decoding, the prompts shared out among the ranks; -1 when the
  // data is not synthetic.
  absl::StatusOr<double> synthetic_accuracy();
  // The end-of-run sample for text and synthetic data ("" for token
  // shards); every rank computes it.
  absl::StatusOr<std::string> sample_text();

  const JobConfig& config() const { return cfg_; }
  const GptLayout& layout() const { return model_->layout(); }
  int64_t num_params() const { return layout().num_params(); }
  Communicator& comm() const { return *comm_; }
  const ZeroEngine& zero() const { return *zero_; }
  // The full fp32 master weights in flat order (a collective).
  absl::StatusOr<std::vector<float>> master_params() { return zero_->gather_master_params(); }

  // Saves the state after the last step as root/step-N (checkpoint_dir.h),
  // a collective: every rank writes its share of the parameters and
  // optimizer states (under stage 0 rank 0 alone), rank 0 the manifest last;
  // then the directory is published and all but the newest `keep` removed.
  // Returns the checkpoint's path.
  absl::StatusOr<std::string> save_checkpoint(const std::string& root, int keep);
  // Continues from a checkpoint directory saved with the same model,
  // precision and optimizer (a collective). At the saved partition (the
  // same world size, or stage 0 on both sides) later steps are bitwise
  // those of the saved run; at another world size each rank reads its part
  // of the saved shards (8-bit states requantized in its own blocks).
  // Everything is checked (manifest, checksums, array shapes) before
  // anything changes.
  absl::Status resume(const std::string& checkpoint);
  int64_t steps_done() const { return steps_; }

 private:
  Trainer(const JobConfig& cfg, Communicator* comm);
  absl::Status build();

  JobConfig cfg_;
  std::unique_ptr<Communicator> own_comm_;  // the world of one, when none was given
  Communicator* comm_;
  Dataset data_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<ZeroEngine> zero_;
  Buffer inputs_, targets_;
  LossScaler scaler_;
  int64_t steps_ = 0;    // attempted
  int64_t updates_ = 0;  // applied
  double last_lr_ = 0;
  uint64_t sample_rng_state_;
};

}  // namespace zerod
