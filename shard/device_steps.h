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
// Where the working copy is in host memory (offload_param to `cpu`), the
// kernel writes it in the slot and it goes back with the states.
//
// A unit summed on the host may go the same way, its sum copied up with
// the states, where the plan (share()) finds the device done with it
// sooner than the host would be. Those go through slots and streams of
// their own (a second lane): a device sum's update waits for the compute
// stream to make it, which a host sum, complete when it is given, must
// not wait behind.
//
// Why: a host core moves about 30 bytes of memory per parameter for AdamW
// (masters, m, v and gradients read, three written, the working copy
// made); the link moves 12 each way with no host core at all, and the
// GPU's memory makes the kernel's time nothing beside the copies.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
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

  // What a unit's update moves, in bytes: `states` (masters and states),
  // `numel` gradients, `working` bytes an element of its working copy.
  struct UnitBytes {
    int64_t states = 0, numel = 0;
    int working = 2;
  };
  // Which of the units summed on the host (`kept` and after) the device
  // updates, the others staying the host's: each, from the last unit on
  // (backward's order, but for the final LayerNorm's, complete last and
  // tiny), goes where it would be done sooner, behind what is there
  // already; the device starts with the kept units. The device's
  // time is what goes up (states and the sum; the states come back at
  // once, the other way), the host's what its memory moves (states read
  // and written, the sum read, the working copy written), both at one
  // rate: on the H200 machine the link moved 55 GB/s (16 MiB copies) and
  // the host's AdamW about 52 (gpt2-xl's in 903 ms; bench/RESULTS.md).
  static std::vector<bool> share(const std::vector<UnitBytes>& units, int kept);

  // `optimizer`: bound to pinned host memory, its pieces the owned
  // segments; it outlives this. Unit u is pieces unit_pieces[u]; the
  // first `kept` are summed on the device, the others on the host (and
  // some updated here: takes()). `working_on_host`: the working copy is in
  // host memory (offload_param), written there from a slot. `part_elements`
  // (a multiple of kQuantBlock; tests) in place of the planned part.
  static absl::StatusOr<std::unique_ptr<DeviceSteps>> create(ZeroContext& ctx, const Optimizer& optimizer,
                                                             const std::vector<std::pair<int, int>>& unit_pieces,
                                                             int kept, bool working_on_host, int64_t part_elements = 0);
  // Waits for what is in flight.
  ~DeviceSteps();
  // The slots of each lane, by lane (sums on the device, then on the host):
  // with `kept` units of shape's summed on the device, the others on the
  // host; parts of `part_elements` (0: part_elements(shape)).
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, int kept, bool working_on_host,
                                         int64_t part_elements = 0);

  // Whether unit u, summed on the host, is updated here (share()).
  bool takes(int u) const { return takes_[u]; }
  // Pieces [first, last) (owned segments, one after another in the shard)
  // updated with their gradients from `grads` (piece first's first
  // element), piece k's working copy at `working[k]` (on the device, or in
  // host memory: there once the model is done with it for the step). Sums
  // on the device are read once what the compute stream has been given
  // so far is done; sums in host memory (`grads_on_host`: pinned, left
  // alone until finish()) are copied up with the states. From any thread.
  void enqueue(int first, int last, const float* grads, bool grads_on_host, const std::vector<void*>& working, float lr,
               int64_t step, float grad_scale);
  // The compute stream waits for the updates (the working copy, and the
  // sums they read), and the host for the masters and states to be back.
  absl::Status finish();
  // Parts updated since creation.
  int64_t parts() const { return lanes_[0].parts + lanes_[1].parts; }

 private:
  struct Slot {
    Buffer buf;
    std::unique_ptr<Event> uploaded, updated, downloaded;
  };
  // Slots and streams for the sums of one place, parts going through the
  // slots in turn.
  struct Lane {
    std::mutex mu;  // enqueue's, from any thread
    Slot slots[kSlots];
    std::unique_ptr<Stream> up, update, down;
    std::unique_ptr<Event> done;
    int64_t next = 0, parts = 0;
  };
  DeviceSteps(ZeroContext& ctx, const Optimizer& optimizer) : ctx_(ctx), optimizer_(optimizer) {}
  // Elements of a slot's part: kPartElements, or the largest piece where
  // that is less (a multiple of kQuantBlock either way).
  static int64_t part_elements(const ZeroShape& shape);
  // Bytes of a slot of the lane of sums on the host or on the device, with
  // room for the working copy where it goes to the host (`working_bytes`
  // an element, else 0).
  static uint64_t slot_bytes(int64_t part_elements, bool host_sums, size_t working_bytes);
  absl::Status create_lane(Lane& lane, const BufferSpec& slots);

  ZeroContext& ctx_;
  const Optimizer& optimizer_;
  int64_t part_elements_ = 0;
  bool working_on_host_ = false;
  std::vector<bool> takes_;
  Lane lanes_[2];  // sums on the device, then on the host (each created where there are some)
  std::unique_ptr<Event> ready_;
};

}  // namespace zerod
