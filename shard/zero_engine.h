// ZeRO stages 0-3 for one rank: the collectives and the three stores that
// keep the ranks on the single-process trajectory.
//
//   stage 0: everything replicated; gradients all-reduced at the boundary.
//   stage 1: fp32 master weights and optimizer states only for the rank's
//            shard; full gradients reduce-scattered at the boundary; the
//            updated parameters all-gathered.
//   stage 2: as 1, but each unit's gradients are reduce-scattered as soon as
//            backward has produced them (overlapping the backward of earlier
//            layers), and only the rank's gradient shard is kept.
//   stage 3: as 2, and the parameters too exist only as shards, each unit
//            all-gathered just before use.
//
// Which parameter store (param_store.h), gradient store (grad_store.h) and
// optimizer state (optimizer_state.h) a rank uses is chosen once, from the
// stage and the offload settings, in create(); past that the engine only
// calls their interfaces.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "offload/aio_engine.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/cpu_device.h"
#include "runtime/model/param_init.h"
#include "shard/device_steps.h"
#include "shard/grad_store.h"
#include "shard/optimizer_state.h"
#include "shard/param_store.h"
#include "shard/saved_shards.h"
#include "shard/zero_config.h"
#include "shard/zero_context.h"

namespace zerod {

struct ZeroSettings {
  ZeroConfig zero;
  OptimizerConfig optimizer;
  DType precision = DType::kF32;  // of the working parameters
  AioConfig aio;
  ParamInit init;  // the initial parameters
  // A frozen base's linear layers as its file holds them in NF4 (null:
  // quantized from init's values).
  Nf4ModuleReader nf4_held;
  // Faults for the offload tiers' file I/O (tests inject them here).
  IoFaultHook io_faults;
  // Clipping or a loss scale: an update's gradient factor is known only
  // once every gradient is.
  bool factor_after_backward = false;
  DType operands = DType::kF32;  // the kernel table's (kernels.h)
  int micro_batches = 1;         // of a step (gradient_accumulation_steps)
};

// Which stores a rank keeps and how they work, from its settings and its
// device: chosen once, the same way for create() and plan().
struct StoreChoice {
  bool params_offloaded = false, params_in_file = false;
  bool states_in_file = false, grads_in_file = false;
  bool optimizer_on_host = false;
  // fp32 master weights apart from the working parameters: with 16-bit
  // parameters, ones not in memory, or ones the host optimizer cannot reach.
  bool separate_masters = false;
  // Updates during backward keep what they overwrite (super_offload, with a
  // factor known only after backward).
  bool undoable = false;
  bool during_backward = false;  // ZeroEngine::updates_during_backward()
  // Of those, the units summed on a GPU are updated there (device_steps.h),
  // and some summed on the host, the masters and states in `staging`
  // memory: on a GPU, where the working copy is 16-bit (in its memory, or
  // offloaded to host memory), the states in host memory, and nothing to
  // undo.
  bool updates_on_device = false;
  Tier staging = Tier::kHost;  // offload_optimizer's host buffers
  // Stages 2 and 3 (zero_optimization.micro_batch_grads, resolved): each
  // micro-batch's reduced gradients rounded to the 16-bit type with
  // "compute"; with the optimizer offloaded and several micro-batches,
  // their sum kept on the device and sent to the host once: every unit's
  // with "fp32", the first units' in compute_sums_on_device_bytes with
  // "compute".
  MicroBatchSums sums;
};
StoreChoice choose_stores(const ZeroSettings& settings, const PlanDevice& device);
// The host memory an offloaded optimizer's masters and states take (none:
// on the device).
std::optional<Tier> optimizer_memory(const StoreChoice& c);
// Whether a rank of a world of `world_size` with these stores steps on the
// device's stream (ZeroEngine::enqueue_step): a world of one at stage 0
// with the optimizer in the device's memory, where gradients need no
// reduction and nothing of the update is the host's.
bool steps_on_stream(const ZeroSettings& settings, const StoreChoice& c, int world_size);

class ZeroEngine {
 public:
  // This rank's stores, initialised by settings.init. Its buffers live on
  // `device`, whose table `kernels` is; layout, comm, device and kernels
  // outlive the engine.
  static absl::StatusOr<std::unique_ptr<ZeroEngine>> create(const GptLayout& layout, const ZeroSettings& settings,
                                                            Communicator& comm, Device& device, Kernels& kernels);
  ~ZeroEngine();
  // What create() allocates for rank `rank` of `world_size`, on plan's device
  // (settings.init is not used), and with `saves_checkpoints` what saving
  // the rank's shard takes.
  static void plan(const GptLayout& layout, const ZeroSettings& settings, int world_size, int rank,
                   bool saves_checkpoints, MemoryPlan& plan);

  WeightSource& weights() { return params_->weights(); }
  GradSink& grads() { return grads_->sink(); }

  // Start of an optimizer step: gradients to zero.
  void zero_grads();
  // After the last micro-batch: every rank holds the global sum of the
  // gradients it owns.
  absl::Status reduce_gradients();
  // Sum of squares of all gradients (every rank's part, all-reduced); not
  // finite when any rank's gradients overflowed.
  absl::StatusOr<double> grad_sum_squares();
  // The configured optimizer on the owned shard, with gradients multiplied
  // by grad_factor (`step` is the 1-based update count); then the new
  // parameters are made visible to the model on every rank.
  absl::Status apply_optimizer(float lr, int64_t step, float grad_factor);
  // A step with no update (an fp16 overflow, or one that fails): an update
  // begun during backward is undone.
  absl::Status skip_optimizer();
  // Where steps_on_stream(): the step after the last micro-batch, enqueued
  // on the compute stream with nothing waited for. The sum of squares of
  // the gradients and the update factor from it (update_factor in
  // cpu/adam.h, with loss_scale and clip) are computed there; the update
  // reads the factor, and skips itself where it is not finite; the
  // parameters are published. step_sum_squares() is the sum once the
  // stream has passed the step: the step's gradients overflowed, and
  // nothing changed, where it is not finite.
  bool steps_on_stream() const { return on_stream_; }
  absl::Status enqueue_step(float lr, int64_t step, double loss_scale, double clip);
  double step_sum_squares() const { return *unit_sums_host_.host<double>(); }  // its first 8 bytes
  // Whether the update runs during the last micro-batch's backward: at
  // stage 2 or 3 with the optimizer on the host, gradients added there as
  // they arrive; and, where the factor is known only after backward,
  // super_offload set.
  bool updates_during_backward() const { return stores_.during_backward; }
  // After zero_grads: each unit's part of the update (lr, `step`, gradients
  // times grad_factor) runs on the host as soon as the unit's gradients of
  // all `micro_batches` are reduced, while backward goes on. The result is
  // the ordered update's, bitwise: the update is elementwise and each
  // unit's gradients are final when it runs. apply_optimizer then only
  // publishes when its factor is grad_factor; when clipping changed it, the
  // units are put back as they were and updated again, and skip_optimizer
  // puts them back.
  void update_during_backward(float lr, int64_t step, int micro_batches, float grad_factor);

  // The full fp32 master weights, in the layout's flat order (a collective):
  // the caller's copy, for tests; the gathering goes through the accountant.
  absl::StatusOr<std::vector<float>> gather_master_params();

  // Checkpoints. This rank's share of the training state is the fp32 master
  // weights of its owned segments and the optimizer's state arrays (a shard
  // file, saved_shards.h); the state is split into shard_count() such files
  // (one under stage 0, where every rank holds all of it).
  // save_shard writes it and returns the file's CRC-32C; shard_file() lays
  // the file out (its bytes() are its size) and serialize_shard gives those
  // bytes front to back to a sink, such as a staging buffer that is written
  // out in the background. load_shard reads a file written for the same
  // partition and optimizer (every array is checked before any is read);
  // load_resharded takes this rank's part from the files of any partition.
  // Both rebuild the working copy of the owned parameters; then
  // publish_params() makes them visible on every rank (a collective).
  int shard_count() const { return ctx_.part.world_size(); }
  absl::StatusOr<uint32_t> save_shard(const std::string& path);
  absl::StatusOr<SafetensorsLayout> shard_file() const;
  // The size of shard_file() for a rank of that shape and optimizer.
  static absl::StatusOr<uint64_t> shard_file_bytes(const ZeroShape& shape, const OptimizerConfig& optimizer);
  absl::Status serialize_shard(const SafetensorsLayout& file, const ByteSink& out);
  // Whether the whole shard is in memory (no states in a swap file), so
  // copying it is a memcpy rather than a read.
  bool shard_in_memory() const { return optimizer_->in_memory(); }
  absl::Status load_shard(const std::string& path);
  absl::Status load_resharded(SavedShards& saved);
  // The host buffers a rank of `shape` reads a checkpoint into, by
  // ReadBack: load_shard's (the masters), or with `resharded`
  // load_resharded's (all three).
  enum ReadBack { kMastersReadBack, kStatesReadBack, kSegmentReadBack };
  static std::vector<BufferSpec> resume_buffers(const ZeroShape& shape, const OptimizerConfig& optimizer,
                                                bool resharded);
  absl::Status publish_params() { return params_->publish(); }

  // Seconds spent blocked on stage 2/3 collectives in forward and backward
  // since creation: the communication that overlap did not hide.
  double pass_comm_wait_s() const { return ctx_.pass_wait_s; }
  // Units whose update ran during backward (update_during_backward) since
  // creation, and of them those updated on the device (in parts).
  int64_t units_updated_in_backward() const { return units_updated_in_backward_; }
  int64_t units_updated_on_device() const { return units_updated_on_device_; }
  // Of the units summed on the host, those updated on the device each step.
  int units_shared_with_device() const;
  int64_t parts_updated_on_device() const { return device_steps_ ? device_steps_->parts() : 0; }
  // Steps whose update during backward was undone since creation.
  int64_t updates_undone() const { return updates_undone_; }

 private:
  ZeroEngine(const GptLayout& layout, const ZeroSettings& settings, Communicator& comm, Device& device,
             Kernels& kernels);
  absl::Status build();
  // The stores the settings call for; the disks are checked first.
  absl::Status create_stores();
  // Its pieces are the owned segments; `init` sets the masters and the
  // working copy from settings_.init.
  absl::Status create_optimizer();
  // The stores `c` chooses for `rank`, as both the plan and create_stores
  // build them (`accountant`: none in a plan).
  static ParamStoreChoice param_store(const ZeroSettings& settings, const StoreChoice& c, const PlanDevice& device,
                                      int rank, MemoryAccountant* accountant);
  static GradStoreChoice grad_store(const ZeroSettings& settings, const StoreChoice& c, const PlanDevice& device,
                                    int rank, MemoryAccountant* accountant);
  // The engine's own buffers, by Own: each unit's sum of squared
  // gradients where the gradients are and on the host, the factor of a
  // step on the stream, the sums of the units updated on the device.
  enum Own { kUnitSums, kUnitSumsOnHost, kStreamStep, kDeviceUnitSums };
  static std::vector<BufferSpec> own_buffers(const ZeroShape& shape, const ZeroSettings& settings, const StoreChoice& c,
                                             int world_size, const PlanDevice& device);
  static ShardStoreSettings store_settings(const ZeroSettings& settings, const OffloadConfig& off, Category c,
                                           const std::string& file, const PlanDevice& device,
                                           MemoryAccountant* accountant);
  static SwapSettings swap_settings(const ZeroSettings& settings, const StoreChoice& c, const ZeroShape& shape,
                                    bool grads_streamed, const std::string& file, MemoryAccountant* accountant);
  // The bytes of the shard file's array i (kMasterArray, then `states`).
  absl::Status write_shard_array(size_t i, const std::vector<StateArray>& states, const ByteSink& out);
  // Makes `master` (the owned segments' fp32 masters back to back) and the
  // state arrays this rank's: fill(a, offset, n, dst) puts bytes
  // [offset, offset + n) of array a into dst.
  using StateFill = std::function<absl::Status(const StateArray& a, uint64_t offset, uint64_t n, void* dst)>;
  absl::Status install_state(const float* master, const StateFill& fill);
  // What the optimizer's new masters go through to the working copy, when
  // the optimizer does not write it itself (empty then).
  OptimizerState::MasterOut working_copy_writer();
  // Ends an update begun during backward: true when it stands (its factor
  // was grad_factor); false when none was begun, or it is undone (the
  // working copy set back from the restored masters when restore_working).
  absl::StatusOr<bool> end_update_during_backward(float grad_factor, bool restore_working);
  // Each unit's sum of squared gradients not yet taken this step, into
  // unit_sums_, on d's compute stream with d's kernels k (where the
  // gradients are).
  absl::Status enqueue_unit_sums(Device& d, Kernels& k);

  ZeroSettings settings_;  // init only while building
  // The host, where an offloaded optimizer runs: synchronous, with the CPU
  // kernels, in the device's accounts.
  CpuDevice host_;
  std::unique_ptr<Kernels> host_kernels_;
  ZeroContext ctx_;
  StoreChoice stores_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<GradStore> grads_;
  std::unique_ptr<OptimizerState> optimizer_;
  // Each unit's owned pieces, [first, last) of the optimizer's.
  std::vector<std::pair<int, int>> unit_pieces_;
  bool updating_during_backward_ = false;
  float factor_during_backward_ = 1.0f;
  std::atomic<int64_t> units_updated_in_backward_{0};  // counted on the host thread
  std::atomic<int64_t> units_updated_on_device_{0};    // on backward's thread and the host's
  int64_t updates_undone_ = 0;
  Buffer unit_sums_, unit_sums_host_;  // each unit's sum of squared gradients, where they are and on the host
  bool on_stream_ = false;             // steps_on_stream()
  Buffer stream_step_;                 // enqueue_step's sum of squares (a double), then its factor (a float)
  std::vector<char> summed_;           // per unit: its sum taken this step (during backward, on the host thread)
  // With StoreChoice::updates_on_device: each unit's sum of squares where
  // it is taken on the device, those units (this step), and each piece's
  // working copy on the device.
  Buffer device_unit_sums_;
  std::vector<int> summed_on_device_;
  std::vector<void*> working_;
  std::unique_ptr<DeviceSteps> device_steps_;  // before the optimizer it reads goes
};

}  // namespace zerod
