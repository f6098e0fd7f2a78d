// Where this rank keeps the working parameters (the run's dtype) and how the
// model sees all of them. One of three, chosen once from the config:
//   replicated (stages 0-2): every parameter on every rank, the updated
//     chunks all-gathered after each step;
//   sharded (stage 3): only the rank's shard, in memory, units gathered
//     for the model (gathered_weights.h);
//   offloaded (stage 3 with offload_param): the shard in host memory or a
//     file (offload/shard_store.h), each unit's chunk read into a small
//     window just ahead of its gather.
#pragma once

#include <memory>

#include "offload/shard_store.h"
#include "runtime/config/job_config.h"
#include "shard/zero_context.h"

namespace zerod {

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  virtual WeightSource& weights() = 0;
  // Whether the working copy is in memory, where the optimizer writes it as
  // it updates the masters (working()); otherwise updated() writes it.
  virtual bool in_memory() const = 0;
  // Owned segment s's working copy on the device (where the optimizer's
  // kernels write it); null when not in_memory().
  virtual void* working(const ShardSegment& s) = 0;
  // Sets elements [start, start + n) of owned segment s from fp32 values.
  virtual absl::Status write(const ShardSegment& s, int64_t start, const float* src, int64_t n) = 0;
  // The optimizer has updated those elements' fp32 masters: a copy that is
  // not in memory is written from them.
  virtual absl::Status updated(const ShardSegment& /*s*/, int64_t /*start*/, const float* /*master*/, int64_t /*n*/) {
    return absl::OkStatus();
  }
  // The owned part is written: every rank sees the new parameters (a
  // collective).
  virtual absl::Status publish() = 0;
};

absl::StatusOr<std::unique_ptr<ParamStore>> replicated_params(ZeroContext& ctx);
absl::StatusOr<std::unique_ptr<ParamStore>> sharded_params(ZeroContext& ctx, const ZeroConfig& z);
absl::StatusOr<std::unique_ptr<ParamStore>> offloaded_params(ZeroContext& ctx, const ZeroConfig& z,
                                                             ShardStoreSettings settings);

}  // namespace zerod
