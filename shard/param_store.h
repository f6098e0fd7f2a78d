// Where this rank keeps the working parameters (the run's dtype) and how the
// model sees all of them. One of three, chosen once from the config:
//   replicated (stages 0-2): every parameter on every rank, the updated
//     chunks all-gathered after each step;
//   sharded (stage 3): only the rank's shard, in memory, units gathered
//     for the model (gathered_weights.h);
//   offloaded (stage 3 with offload_param): the shard in host memory or a
//     file (offload/shard_store.h), each unit's chunk read into a small
//     window just ahead of its gather; written through a window of its own
//     where the host writes units during backward.
#pragma once

#include <memory>

#include "offload/shard_store.h"
#include "shard/gathered_weights.h"
#include "shard/zero_config.h"
#include "shard/zero_context.h"

namespace zerod {

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  virtual WeightSource& weights() = 0;
  // Whether the working copy is in memory, where an optimizer on the device
  // writes it as it updates the masters (working()); otherwise write()
  // sets it from the new masters.
  virtual bool in_memory() const = 0;
  // Owned segment s's working copy on the device (where the optimizer's
  // kernels write it); null when not in_memory().
  virtual void* working(const ShardSegment& s) = 0;
  // Owned segment s's working copy where it is not in_memory() but in host
  // memory (offloaded to `cpu`): where a copy from the device may write it,
  // once the model is done with it for the step, in place of write(); null
  // elsewhere.
  virtual void* working_on_host(const ShardSegment& /*s*/) { return nullptr; }
  // Sets elements [start, start + n) of owned segment s from fp32 values on
  // the host; publish() makes them visible. A unit is written whole, one
  // call after another, once the model is done with it for the step: on
  // the host thread during backward, or after it.
  virtual absl::Status write(const ShardSegment& s, int64_t start, const float* src, int64_t n) = 0;
  // The owned part is written: every rank sees the new parameters (a
  // collective).
  virtual absl::Status publish() = 0;
};

// Which store keeps the working parameters, and what it is built with.
struct ParamStoreChoice {
  enum Kind {
    kReplicated,  // stages 0-2: every parameter on every rank
    kSharded,     // stage 3: the rank's shard in memory
    kOffloaded,   // stage 3 with offload_param: the shard in a ShardStore
  };
  Kind kind = kReplicated;
  // In memory: the tier of the host buffers write() goes through, and
  // whether the optimizer writes the working copy from the host (master
  // weights apart from it), through an upload ring where the host cannot
  // reach the device's memory.
  Tier staging = Tier::kHost;
  bool written_from_host = false;
  // Offloaded: the store's settings, and whether write() is called from
  // another thread while the gathers read.
  ShardStoreSettings offload{};
  bool written_during_backward = false;
};

// What the chosen store allocates on `device`; the store allocates from
// the same description.
std::vector<BufferSpec> param_store_buffers(const ZeroShape& shape, const ZeroConfig& z, const ParamStoreChoice& c,
                                            const PlanDevice& device);
// `unpack`: what a gathered layer unit is to the model, where units are not
// the layout's tensors (stage 3).
absl::StatusOr<std::unique_ptr<ParamStore>> create_param_store(ZeroContext& ctx, const ZeroConfig& z,
                                                               ParamStoreChoice c, LayerUnpack unpack = {});

}  // namespace zerod
