// The training engine of one worker: model, data loader, learning-rate
// schedule and loss scaling, with parameters, gradients and optimizer states
// held (and sharded across ranks) by the ZeRO engine.
//
// Mixed precision (bf16/fp16): working parameters and activations are 16-bit,
// gradients accumulate in fp32, and fp32 master weights live with Adam's m
// and v (fp32, or 8-bit with AdamW8bit) as optimizer state.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/config/job_config.h"
#include "runtime/core/device.h"
#include "runtime/core/memory.h"
#include "runtime/core/profiler.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/dataset.h"
#include "runtime/data/eval_windows.h"
#include "runtime/engine/loss_scaler.h"
#include "runtime/model/gpt.h"
#include "runtime/telemetry/step_result.h"
#include "shard/frozen_weights.h"
#include "shard/zero_engine.h"

namespace zerod {

// A committed checkpoint. seconds runs from the start of the save to its
// commit; blocked_s is the part of it spent in start_checkpoint and
// finish_checkpoint, which training waits for. In the background that is
// making the directory, copying this rank's shard to a staging buffer, the
// polls and the commit.
struct SavedCheckpoint {
  int64_t step = 0;
  std::string path;
  double seconds = 0;
  double blocked_s = 0;
};

// The seams through which a trainer's surroundings reach into it, beyond
// the config: tests inject faults here. The default is none.
struct TrainerEnv {
  // Faults in its file I/O: the offload tiers' files and the checkpoint's.
  IoFaultHook io_faults;
};

// The ZeRO engine's settings for a job whose parameters are laid out as
// `layout`, their initial values opened (model.init_from, or for an adapter
// layout model.lora.init_from; checked whole) or drawn from run.seed.
absl::StatusOr<ZeroSettings> zero_settings(const JobConfig& cfg, const GptLayout& layout, IoFaultHook io_faults = {});
// The same settings for planning `cfg` (no initial values), with the kernel
// table's operand type `operands`.
ZeroSettings planned_zero_settings(const JobConfig& cfg, DType operands);

class Trainer {
 public:
  // Loads the data and builds everything; an error's kind tells bad input
  // from a failure (exit_codes.h). Every
  // rank of `comm` (a world of one when null) builds its own trainer, and
  // from then on all of them call the same methods in the same order. It
  // trains on `device`, or on the one run.device names when that is null.
  static absl::StatusOr<std::unique_ptr<Trainer>> create(const JobConfig& cfg, Communicator* comm = nullptr,
                                                         Device* device = nullptr, TrainerEnv env = {});

  // One optimizer step over gradient_accumulation_steps micro-batches of
  // this rank's part of the global batch.
  absl::StatusOr<StepResult> step();

  // The held-out set's mean loss after the steps so far (data.eval,
  // run.eval.batches global batches of it, all where 0), in the model's
  // precision without dropout: each rank scores every world-th window, the
  // sums added across ranks (a collective). Neither the training's bits nor
  // its data order change. Fails when the job has no data.eval.
  absl::StatusOr<EvalResult> evaluate();
  // The evaluations so far, saved with checkpoints and resumed; `record`
  // counts one, returning whether it is the best so far.
  const EvalRecord& eval_record() const { return eval_record_; }
  // The walk's place: with data.sources, the windows each gave.
  DataLoader::State loader_state() const { return loader_->state(); }
  bool record(const EvalResult& r) { return eval_record_.add(r); }

  // Continues each prompt by exactly max_new tokens (greedy at temperature
  // 0), each cut after its first `stop` when stop >= 0. Prompts of one
  // length share forward passes, as many rows a pass as the model holds
  // tokens; the number of passes depends only on the prompts' lengths and
  // max_new, so ranks stay in step under ZeRO-3.
  absl::StatusOr<std::vector<std::vector<int32_t>>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                                             int max_new, double temperature, int stop = -1);
  // Fraction of the synthetic task's held-out prompts answered exactly by
  // greedy decoding (every rank answers all of them); -1 when the data is
  // not synthetic.
  absl::StatusOr<double> synthetic_accuracy();
  // The end-of-run sample for text and synthetic data ("" for token
  // shards); every rank computes it.
  absl::StatusOr<std::string> sample_text();

  const JobConfig& config() const { return cfg_; }
  // The trained parameters' layout: the model's, or with model.lora the
  // adapters' (the model's weights are then frozen, base_weights()).
  const GptLayout& layout() const { return adapters_ ? *adapters_ : model_->layout(); }
  const GptLayout& model_layout() const { return model_->layout(); }
  // LoRA's frozen model weights; null without model.lora.
  FrozenWeights* base_weights() const { return base_.get(); }
  int64_t num_params() const { return layout().num_params(); }
  Communicator& comm() const { return *comm_; }
  const ZeroEngine& zero() const { return *zero_; }
  // The full fp32 master weights of layout() in flat order (a collective).
  absl::StatusOr<std::vector<float>> master_params() { return zero_->gather_master_params(); }

  // Saves the state after the last step as root/step-N (checkpoint_dir.h),
  // a collective: every rank writes its share of the parameters and
  // optimizer states (under stage 0 rank 0 alone), rank 0 the manifest last;
  // then the directory is published and all but the newest `keep` removed.
  // Returns the checkpoint's path. The same as start_checkpoint in the
  // foreground followed by finish_checkpoint(true).
  absl::StatusOr<std::string> save_checkpoint(const std::string& root, int keep);
  // Starts such a save (a collective; one at a time). In the background,
  // where it can be (this rank's shard is in memory and a staging buffer of
  // its size fits the host limit), the shard is copied to the staging
  // buffer, kept for later saves, and a thread writes it while training
  // goes on; otherwise it is written before this returns. Either way the
  // checkpoint is published by finish_checkpoint.
  absl::Status start_checkpoint(const std::string& root, int keep, bool background);
  bool checkpoint_pending() const { return pending_.has_value(); }
  // Once every rank's file is written and fsynced, rank 0 writes the
  // manifest, publishes the checkpoint and removes those past `keep`. A
  // collective, called by every rank at the same point: with `wait` it
  // waits for the writes; without, it returns nullopt while any rank is
  // still writing, and leaves the removal to a thread. An error abandons
  // the save (its .tmp directory is left for the next save to replace).
  absl::StatusOr<std::optional<SavedCheckpoint>> finish_checkpoint(bool wait);
  // A commit without `wait` leaves the removal of checkpoints past `keep`
  // to a thread (rank 0's); this waits for it and returns its error. The
  // next commit waits for it too.
  absl::Status finish_pruning();

  // Continues from a checkpoint directory saved with the same model,
  // precision and optimizer (a collective). At the saved partition (the
  // same world size, or stage 0 on both sides) later steps are bitwise
  // those of the saved run; at another world size each rank reads its part
  // of the saved shards (8-bit states requantized in its own blocks).
  // Everything is checked (manifest, checksums, array shapes) before
  // anything changes. Every rank fails when one does, with an error of the
  // same exit status when it did not fail itself.
  absl::Status resume(const std::string& checkpoint);
  int64_t steps_done() const { return steps_; }
  // With wall_clock_breakdown: where the steps' time went, collected at the
  // end of each step ("step" is each step's host time); null otherwise.
  Profiler* profiler() const { return profiler_.get(); }
  ~Trainer();

  // Where a run's resume() reads from: nothing, a checkpoint of the run's
  // own partition (a shard file a rank), or of another.
  enum class ResumeFrom { kNothing, kSamePartition, kOtherPartition };
  // For `checkpoint` ("": none), by its manifest's shard files against the
  // shard count of `cfg` at `world_size`; a manifest that cannot be read is
  // left to resume() to refuse, and counts as nothing here.
  static ResumeFrom resume_from(const JobConfig& cfg, int world_size, const std::string& checkpoint);

  // What create() and a run of the trainer allocate on rank `rank` of
  // `world_size`, on plan's device whose kernel table needs `kernels`: the
  // table's buffers, the model, LoRA's frozen weights, the ZeRO engine, the
  // token buffers, a resume's read buffers and a checkpoint's staging.
  static absl::Status plan(const JobConfig& cfg, int world_size, int rank, const KernelMemory& kernels,
                           MemoryPlan& plan, ResumeFrom resume = ResumeFrom::kNothing);

 private:
  Trainer(const JobConfig& cfg, Communicator* comm, Device* device, TrainerEnv env);
  absl::Status build();
  absl::StatusOr<StepResult> train_step();
  // Reads the step's micro-batches into the token buffers; returns what the
  // losses and gradients summed over them and the ranks are divided by to
  // be the global batch's mean.
  double read_batches();
  // Step `step`'s passes, their gradients scaled by `grad_scale`, then
  // those gradients reduced, or (on the stream) the update at `lr` enqueued
  // and waited for; returns the gradients' sum of squares (not finite
  // where they were not).
  absl::StatusOr<double> compute_gradients(int64_t step, float grad_scale, double lr, double loss_scale);
  // What the model computes with: the engine's parameters, or with LoRA
  // the frozen weights with the engine's adapters beside them.
  WeightSource& weights() { return adapted_ ? static_cast<WeightSource&>(*adapted_) : zero_->weights(); }
  // The manifest of the state after the last step, all but its file list.
  nlohmann::json manifest_state() const;
  // This rank's shard file copied into staging_ (allocated on first use);
  // its size, or 0 when the buffer would pass the host memory limit.
  absl::StatusOr<uint64_t> stage_shard();

  JobConfig cfg_;
  TrainerEnv env_;
  std::unique_ptr<Communicator> own_comm_;  // the world of one, when none was given
  Communicator* comm_;
  std::unique_ptr<Device> own_device_;  // the one run.device names, when none was given
  Device* device_;
  std::unique_ptr<Profiler> profiler_;  // before kernels_, which may time into it
  std::unique_ptr<Kernels> kernels_;
  Dataset data_;
  std::unique_ptr<DataLoader> loader_;
  Dataset eval_data_;                  // data.eval's own dataset, when it names one
  std::unique_ptr<EvalWindows> eval_;  // with data.eval
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<GptLayout> adapters_;  // with model.lora: what zero_ trains
  std::unique_ptr<ZeroEngine> zero_;
  std::unique_ptr<FrozenWeights> base_;      // with model.lora
  std::unique_ptr<AdaptedWeights> adapted_;  // base_ and zero_'s adapters
  Buffer inputs_, targets_;
  Buffer positions_;  // packed data's (the training data's or the held-out set's)
  // Micro-batch `micro`'s positions in positions_, or null for data not packed.
  int32_t* positions(int micro) {
    return data_.packed ? positions_.host<int32_t>() + int64_t(micro) * cfg_.micro_batch * cfg_.data.seq_len : nullptr;
  }
  LossScaler scaler_;
  int64_t steps_ = 0;    // attempted
  int64_t updates_ = 0;  // applied
  double last_lr_ = 0;
  uint64_t sample_rng_state_;
  EvalRecord eval_record_;

  // A save between start_checkpoint and its commit.
  struct PendingSave {
    int64_t step = 0;
    std::string root;
    int keep = 1;
    nlohmann::json manifest;  // rank 0's
    std::chrono::steady_clock::time_point start;
    // In start_checkpoint and finish_checkpoint so far: clock ticks, so that
    // it never exceeds the whole save's duration by a rounding.
    std::chrono::steady_clock::duration blocked{};
    // This rank's file: written in the background (the CRC to come), or
    // already written, {ok, crc, bytes}.
    std::future<absl::StatusOr<uint32_t>> write;
    uint64_t staged_bytes = 0;
    std::vector<int64_t> result = {1, 0, 0};
    absl::Status status;
  };
  Buffer staging_;
  // After staging_, so that a write in flight ends before the buffer is freed.
  std::optional<PendingSave> pending_;
  std::future<absl::Status> prune_;  // removing checkpoints past `keep`
};

}  // namespace zerod
