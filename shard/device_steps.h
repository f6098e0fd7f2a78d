// Stages 2 and 3 with the optimizer in pinned host memory and a GPU beside
// it: the update of a unit whose gradient sum is on the GPU
// (MicroBatchSums::device_units) runs there, and the host does nothing for
// it. Its pieces go part by part through a few slots of GPU memory: a
// part's masters and states are copied up on one stream, updated on a
// second from the sum (the 16-bit working copy written in place), and
// copied back on a third, so that the link carries both ways at once while
// the GPU goes on with backward. The host enqueues and never waits until
// finish(). The result is bitwise the host's update: the kernels of every
// table agree bit for bit (cpu/adam.h), and an update is elementwise.
//
// Why: a host core moves about 30 bytes of memory per parameter for AdamW
// (masters, m, v and gradients read, three written, the working copy
// made); the link moves 12 each way with no host core at all, and the
// GPU's memory makes the kernel's time nothing beside the copies.
#pragma once

#include <memory>
#include <vector>

#include "runtime/optim/optimizer.h"
#include "shard/zero_context.h"

namespace zerod {

class DeviceSteps {
 public:
  static constexpr int kSlots = 3;
  // Elements of a part at most: 16 MiB copies of fp32 arrays, near the
  // link's bandwidth (bench/copy_bandwidth), three slots little beside the
  // GPU's other buffers.
  static constexpr int64_t kPartElements = int64_t{4} << 20;

  // `optimizer`: bound to pinned host memory, its pieces the owned
  // segments; it outlives this. `part_elements` (a multiple of
  // kQuantBlock; tests) in place of the planned part.
  static absl::StatusOr<std::unique_ptr<DeviceSteps>> create(ZeroContext& ctx, const Optimizer& optimizer,
                                                             int64_t part_elements = 0);
  // Waits for what is in flight.
  ~DeviceSteps();
  static void plan(const ZeroShape& shape, MemoryPlan& plan);

  // Pieces [first, last) (owned segments, one after another in the shard)
  // updated once what the compute stream has been given so far is done:
  // their gradients on the device from `grads` (piece first's first
  // element), piece k's working copy at `working[k]` on the device.
  void enqueue(int first, int last, const float* grads, const std::vector<void*>& working, float lr, int64_t step,
               float grad_scale);
  // The compute stream waits for the updates (the working copy, and the
  // sums they read), and the host for the masters and states to be back.
  absl::Status finish();
  // Parts updated since creation.
  int64_t parts() const { return parts_; }

 private:
  struct Slot {
    Buffer buf;
    std::unique_ptr<Event> uploaded, updated, downloaded;
  };
  DeviceSteps(ZeroContext& ctx, const Optimizer& optimizer) : ctx_(ctx), optimizer_(optimizer) {}
  // Elements of a slot's part: kPartElements, or the largest piece where
  // that is less (a multiple of kQuantBlock either way).
  static int64_t part_elements(const ZeroShape& shape);
  static uint64_t slot_bytes(int64_t part_elements);

  ZeroContext& ctx_;
  const Optimizer& optimizer_;
  int64_t part_elements_ = 0;
  Slot slots_[kSlots];
  std::unique_ptr<Stream> up_, update_, down_;
  std::unique_ptr<Event> ready_, done_;
  int64_t next_ = 0, parts_ = 0;
};

}  // namespace zerod
