// Where this rank's gradients are summed, reduced over the ranks and kept
// for the optimizer. One of four, chosen once from the config:
//   full (stages 0-1): backward adds into a buffer of every gradient, which
//     is all-reduced (stage 0) or reduce-scattered into the rank's shard
//     (stage 1) after the last micro-batch; with the optimizer on the host,
//     the reduced shard is then copied there;
//   sharded (stages 2-3): each unit reduce-scattered as backward finishes it
//     (scatter_grads.h), the rank's chunk added to its shard in memory;
//   on the host (stages 2-3 with offload_optimizer cpu): the same, each
//     unit's sum (or each micro-batch's chunk) copied device-to-host on a
//     stream of its own into a shard in host memory, where the optimizer
//     reads it, by host threads while backward goes on (host_adds.h);
//   in a file (stages 2-3 with offload_optimizer nvme): the same, the sums
//     or chunks written (or added) to a file during backward and read back
//     unit by unit, a unit ahead.
// Gradients are summed over ranks; the trainer scales each rank's loss by
// 1/(accumulation * world_size), so the sum is the global-batch mean.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "offload/shard_store.h"
#include "shard/zero_config.h"
#include "shard/zero_context.h"

namespace zerod {

// How the micro-batches of a step reach the sum the optimizer reads
// (stages 2 and 3; zero_optimization.micro_batch_grads resolved).
struct MicroBatchSums {
  static constexpr uint64_t kAll = UINT64_MAX;
  int count = 1;                // micro-batches a step
  DType rounded = DType::kF32;  // each one's reduced gradients rounded to this first (kF32: not)
  // Offloaded stores: bytes of the step's fp32 sum kept on the device,
  // whole units from the first (kAll: every unit), each micro-batch added
  // there and the sum sent once; the other units' micro-batches each leave.
  uint64_t device_bytes = 0;
  // Offloaded to host memory, the units not summed on the device, rounded:
  // of each `fold` micro-batches (and the step's last ones) all but the last
  // are held on the host as sent, and added with the last in one pass.
  // The same adds in the same order, with the sum read and written once.
  int fold = 1;
  // Units [0, device_units(p)) are summed on the device.
  int device_units(const Partition& p) const {
    int k = 0;
    while (k < p.num_units() && static_cast<uint64_t>(p.shard_offset(k + 1)) * 4 <= device_bytes) ++k;
    return k;
  }
};

class GradStore {
 public:
  explicit GradStore(ZeroContext& ctx) : ctx_(ctx) {}
  virtual ~GradStore() = default;
  virtual GradSink& sink() = 0;
  // Start of an optimizer step: gradients to zero.
  virtual void zero() = 0;
  // After the last micro-batch, with backward's work on the stream done:
  // the rank's chunks hold the sum over the ranks (a collective; adds may
  // be left on the stream).
  virtual absl::Status reduce() = 0;
  // Whether the reduced gradients are in memory (owned()), or are read().
  virtual bool in_memory() const { return true; }
  // Whether owned() and acquire() give host memory rather than the device's.
  virtual bool on_host() const { return false; }
  // Owned segment s's reduced gradients, where the optimizer's kernels read
  // them; null when they are not in memory (read() then).
  virtual const float* owned(const ShardSegment& s) = 0;
  // Unit u's reduced chunk, until release(u).
  virtual absl::StatusOr<const float*> acquire(int u) = 0;
  virtual absl::Status release(int /*u*/) { return absl::OkStatus(); }
  // Elements [start, start + n) of owned segment s's reduced gradients into
  // dst, in host memory; segments come in shard order.
  virtual absl::Status read(const ShardSegment& s, int64_t start, int64_t n, float* dst);
  // The optimizer has read them: what was held for reading goes.
  virtual absl::Status drop() { return absl::OkStatus(); }
  // Stores that add each unit's reduced chunk on a host thread of their own
  // (on the host, in a file) go on there with work of the caller's:
  // `then(u, grads)` runs once unit u's `count`-th chunk since zero() is
  // added, `grads` being the unit's sum then, in host memory for the call
  // (an empty function clears it); the others never call it. reduce()
  // waits for it all. Unless
  // `keep`, where then() succeeds the caller is done with the unit's
  // gradients for the step: a store that keeps them away from memory need
  // not write them (acquire() and read() of the unit are then not for this
  // step).
  using AfterAdds = std::function<absl::Status(int u, const float* grads)>;
  virtual void after_adds(int /*count*/, AfterAdds /*then*/, bool /*keep*/) {}
  // Of those, a store that sums units on the device (MicroBatchSums::
  // device_units) gives each such unit's sum to `then(u, sum)` in place
  // of sending it to the host, on the thread that adds the unit's count-th
  // chunk, once that add is on the compute stream; `sum` is on the device,
  // kept until zero(). after_adds' then() is not called for those units.
  // An empty function sends them again.
  virtual void after_device_adds(AfterAdds /*then*/) {}

 protected:
  ZeroContext& ctx_;
};

// Which store keeps the gradients, and what it is built with.
struct GradStoreChoice {
  enum Kind {
    kFull,     // stages 0 and 1: backward adds into the padded full buffer
    kSharded,  // stages 2 and 3: each unit's reduced chunk added to the shard on the device
    kHost,     // ... with offload_optimizer cpu: the shard in host memory
    kFile,     // ... with offload_optimizer nvme: the shard in a file
  };
  Kind kind = kFull;
  // Full: reduce-scatter into a shard (stage 1) rather than all-reduce; and,
  // when given, the tier of host memory the reduced shard is copied to.
  bool scatter = false;
  std::optional<Tier> host_tier;
  // Sharded, host and file: what a micro-batch's sums are (zero_engine.h).
  MicroBatchSums sums;
  Tier tier = Tier::kHost;    // host: of the shard
  ShardStoreSettings file{};  // file: the store's
};

// What the chosen store allocates on the device; the store allocates from
// the same description.
std::vector<BufferSpec> grad_store_buffers(const ZeroShape& shape, const ZeroConfig& z, const GradStoreChoice& c);
absl::StatusOr<std::unique_ptr<GradStore>> create_grad_store(ZeroContext& ctx, const ZeroConfig& z, GradStoreChoice c);

}  // namespace zerod
