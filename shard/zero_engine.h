// ZeRO stages 0-3 for one rank: where the parameters, gradients and
// optimizer states live, and the collectives that keep the ranks on the
// single-process trajectory.
//
//   stage 0: everything replicated; gradients all-reduced at the boundary.
//   stage 1: fp32 master weights and Adam states only for the rank's shard;
//            full gradients reduce-scattered at the boundary; the updated
//            parameters all-gathered.
//   stage 2: as 1, but each unit's gradients are reduce-scattered as soon as
//            backward has produced them (overlapping the backward of earlier
//            layers), and only the rank's gradient shard is kept.
//   stage 3: as 2, and the parameters too exist only as shards: each unit is
//            all-gathered just before use (the next layer prefetched) and
//            released after; units below the persistence threshold stay
//            gathered between updates. With offload_param the shard itself
//            lives in host memory or on NVMe (offload/shard_store.h): each
//            unit's chunk is read into a small window just ahead of its
//            gather, and the optimizer's updates are written back to it.
//
// With offload_optimizer nvme at stages 2 and 3 the gradient shard is in a
// file too: each unit's reduced chunk is written (or added) to it during
// backward, and the optimizer reads it back sub-group by sub-group.
//
// Gradients are summed over ranks; the trainer scales each rank's loss by
// 1/(accumulation * world_size), so the sum is the global-batch mean.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "runtime/config/job_config.h"
#include "runtime/core/device.h"
#include "runtime/core/memory.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/hf_gpt2.h"
#include "runtime/model/weights.h"
#include "offload/shard_store.h"
#include "offload/swapped_optimizer.h"
#include "runtime/optim/optimizer.h"
#include "shard/partition.h"
#include "shard/saved_shards.h"

namespace zerod {

class ZeroEngine {
 public:
  // Initialises this rank's parameters from the config's seed.
  // Its buffers live on `device`, whose table `kernels` is; both outlive
  // the engine.
  static absl::StatusOr<std::unique_ptr<ZeroEngine>> create(const GptLayout* layout, const JobConfig& cfg,
                                                            Communicator* comm, Device& device, Kernels& kernels);
  ~ZeroEngine();

  WeightSource& weights();
  GradSink& grads();

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

  // The full fp32 master weights, in the layout's flat order (a collective).
  absl::StatusOr<std::vector<float>> gather_master_params();

  // Checkpoints. This rank's share of the training state is the fp32 master
  // weights of its owned segments and the optimizer's state arrays (a shard
  // file, saved_shards.h); under stage 0 every rank holds all of it.
  // save_shard writes it and returns the file's CRC-32C; shard_file() lays
  // the file out (its bytes() are its size) and serialize_shard gives those
  // bytes front to back to a sink, such as a staging buffer that is written
  // out in the background. load_shard reads a
  // file written for the same partition and optimizer (every array is
  // checked before any is read); load_resharded takes this rank's part from
  // the files of any partition. Both rebuild the 16-bit working copy of the
  // owned parameters; then publish_params() makes them visible on every rank
  // (a collective).
  absl::StatusOr<uint32_t> save_shard(const std::string& path);
  absl::StatusOr<SafetensorsLayout> shard_file() const;
  absl::Status serialize_shard(const SafetensorsLayout& file, const ByteSink& out);
  // Whether the whole shard is in memory (no states in a swap file), so
  // copying it is a memcpy rather than a read.
  bool shard_in_memory() const { return swapped_ == nullptr; }
  absl::Status load_shard(const std::string& path);
  absl::Status load_resharded(SavedShards& saved);
  absl::Status publish_params();
  const std::vector<ShardSegment>& owned_segments() const { return owned_; }

  // Tests only: faults for the offload tiers' file I/O (before create()).
  static void set_swap_fault_hook(IoFaultHook hook);

  // Seconds spent blocked on stage 2/3 collectives (gathers in forward and
  // backward, reduce-scatters in backward and the flush after it), since
  // creation: the communication that overlap did not hide.
  double pass_comm_wait_s() const { return pass_wait_s_; }

  const Partition& partition() const { return part_; }
  int stage() const { return stage_; }

 private:
  class ShardedWeights;
  class ShardedGrads;
  ZeroEngine(const GptLayout* layout, const JobConfig& cfg, Communicator* comm, Device& device, Kernels& kernels);
  absl::Status build();
  // A zeroed buffer on the device (the memset enqueued on the stream).
  absl::Status alloc(Buffer& b, int64_t bytes, Category c);
  Converter converter() const { return {kernels_, stream_}; }
  // The initial fp32 parameters [begin, end): from model.init_from, or
  // drawn from the seed.
  absl::Status initial_params(int64_t begin, int64_t end, float* out) const;
  // Master weights from initial_params(), and the working copy made from them.
  absl::Status init_params();
  // Where element `start` of owned segment s lies in the working parameters.
  char* working_at(const ShardSegment& s, int64_t start);
  // Owned segment s's master weights, when they are in memory.
  float* master_at(const ShardSegment& s) const;
  // Sets elements [start, start + n) of owned segment s's working copy from
  // fp32 values, as the optimizer writes it (to the parameter store when
  // the parameters are offloaded; then flush it after the last).
  absl::Status write_working(const ShardSegment& s, int64_t start, const float* src, int64_t n);
  float* grad_shard() const;
  // The optimizer's state arrays (data null when they are in a file).
  std::vector<StateArray> state_arrays() const;
  // The bytes of the shard file's array i (kMasterArray, then `states`,
  // which are state_arrays()).
  absl::Status write_shard_array(size_t i, const std::vector<StateArray>& states, const ByteSink& out);
  // Makes `master` (the owned segments' fp32 masters back to back) and the
  // state arrays this rank's: fill(a, offset, n, dst) puts bytes
  // [offset, offset + n) of array a into dst.
  using StateFill = std::function<absl::Status(const StateArray& a, uint64_t offset, uint64_t n, void* dst)>;
  absl::Status install_state(const std::vector<float>& master, const StateFill& fill);
  // This rank's chunk of unit u: in the working parameters (offset in
  // elements of working()), and of the fp32 master weights.
  Buffer& working() { return stage_ == 3 ? param_shard_ : params_; }
  int64_t working_offset(int u) const;
  float* master_unit(int u) const;

  const GptLayout* layout_;
  const JobConfig cfg_;
  Communicator* comm_;
  Device& device_;
  Kernels& kernels_;
  Stream& stream_;  // the device's compute stream
  const int stage_;
  const DType dtype_;  // of the working parameters
  const bool params_offloaded_;  // offload_param (stage 3)
  const bool grads_offloaded_;   // offload_optimizer nvme, stages 2-3
  // fp32 master weights apart from the working parameters: with 16-bit
  // parameters, or offloaded ones.
  const bool separate_master_;
  Partition part_;     // world of one under stage 0: every rank owns everything
  const int owner_;    // this rank's index in part_
  std::vector<ShardSegment> owned_;
  std::optional<Gpt2Weights> init_from_;  // while building, with model.init_from

  Buffer params_;       // stages 0-2: all parameters, padded layout, dtype_
  Buffer param_shard_;  // stage 3: this rank's parameters, dtype_, unless offloaded to
  std::unique_ptr<ShardStore> param_store_;
  Buffer master_;       // fp32 master shard, unless the parameters are fp32 and in memory (then
                        // they are the master) or the masters are swapped with the states
  std::unique_ptr<Optimizer> optimizer_;         // states in memory, or
  std::unique_ptr<SwappedOptimizer> swapped_;    // states in a file (offload_optimizer nvme)
  Buffer grads_full_;   // stages 0-1: all gradients, padded layout
  Buffer grad_shard_;   // stages 1-3, unless offloaded to
  std::unique_ptr<ShardStore> grad_store_;
  std::vector<bool> grads_fresh_;  // per unit: nothing stored in grad_store_ since zero_grads()
  Buffer unit_sums_, unit_sums_host_;  // each unit's sum of squared gradients
  double pass_wait_s_ = 0;

  std::unique_ptr<FlatWeights> flat_weights_;       // stages 0-2
  std::unique_ptr<FlatGrads> flat_grads_;           // stages 0-1
  std::unique_ptr<ShardedWeights> sharded_weights_; // stage 3
  std::unique_ptr<ShardedGrads> sharded_grads_;     // stages 2-3
};

}  // namespace zerod
