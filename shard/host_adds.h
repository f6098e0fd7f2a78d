// Stages 2 and 3 with the optimizer on the host: how each unit's reduced
// chunks (ScatterGrads' target) reach the sum the host optimizer reads.
//
// Summed on the device (the first MicroBatchSums::device_units): each
// micro-batch's chunk is rounded and added to a sum on the device, on the
// compute stream, as the in-memory store does; after the last micro-batch
// the unit's sum leaves the device once, straight into the store's host
// memory where the store has some (`Landing`), else in parts through the
// staging buffers; or, where the unit is updated on the device
// (after_device_adds), it stays there.
// Otherwise each micro-batch's chunk leaves the device, in its own type or
// converted on the device to the rounded 16-bit type (half the bytes), in
// parts through the staging buffers, and is widened and added on the host
// in fp32 in one pass; with MicroBatchSums::fold, all but the last of a
// group are copied whole into host memory held for them, and added with
// the group's last, part by part.
//
// The caller (backward) does not wait for the copies or the adds: a sender
// thread enqueues the conversions and copies on a copy stream of their
// own, one part copied while the last is added, and hands each part to an
// adder thread, which waits for that part's copy and adds it where the
// store keeps it. Only a reduction into a chunk buffer the sender still
// reads waits, for that send (reusing()): with one such buffer
// (overlap_comm off), each layer's reduction waits for the last layer's.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "runtime/core/task_thread.h"
#include "shard/grad_store.h"
#include "shard/scatter_grads.h"

namespace zerod {

class HostAdds : public ScatterGrads::Target {
 public:
  // A part of a sent chunk: 2 MiB of what is sent, large enough for a copy
  // to stream near the link's bandwidth, small enough that the staging
  // buffers are little beside the windows.
  static constexpr int64_t kPartBytes = int64_t{2} << 20;
  // Adds elements [start, start + n) of unit u's sum of the step, from each
  // of `srcs` in turn, of type `type` (widened to fp32 as they are added:
  // one pass over host memory), where the store keeps the unit, the first
  // onto zeros when `fresh` (its first part of the step); returns the
  // unit's sum so far, in host memory until the next add.
  using Add = std::function<absl::StatusOr<const float*>(int u, int64_t start, absl::Span<const void* const> srcs,
                                                         DType type, int64_t n, bool fresh)>;
  // Before a reduction into a unit that adds to an earlier chunk of it,
  // `reread(u)` runs on the adder thread (a store in a file reads it ahead).
  using Reread = std::function<absl::Status(int u)>;
  // Where unit u's whole fp32 sum may be copied from the device as it is:
  // host memory of the store's; empty where there is none.
  using Landing = std::function<float*(int u)>;

  HostAdds(ZeroContext& ctx, Add add, Reread reread = {}, Landing landing = {});
  // Sends the reductions in flight, before the sink's chunk buffers they read go.
  ~HostAdds() override;

  // What allocate() allocates, for a store with a landing or not: its own
  // buffers, by Buffers, then its ScatterGrads's.
  enum Buffers { kDeviceSum, kRounded, kStagingParts, kHeld };
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z, const MicroBatchSums& sums,
                                         Tier tier, bool lands);

  GradSink& sink() { return sink_; }
  absl::Status allocate(const ZeroConfig& z, const MicroBatchSums& sums, Tier tier);

  void zero();
  // Every reduction given to the threads, and their work done.
  absl::Status reduce();
  void after_adds(int count, GradStore::AfterAdds then) {
    then_count_ = count;
    then_ = std::move(then);
  }
  // GradStore::after_device_adds.
  void after_device_adds(GradStore::AfterAdds then) { device_then_ = std::move(then); }
  absl::Status started(int u) override;
  absl::Status add(int u, const Buffer& recv) override;
  absl::Status reusing(const Buffer& recv) override;

 private:
  struct Staging {
    Buffer buf;                              // a part as sent, copied from the device
    std::unique_ptr<Event> copied;           // its copy, on the copy stream
    std::shared_future<absl::Status> added;  // the adder thread's add from it
  };
  // One send of unit u's chunk, `src` on the device in the type sent: what
  // the sender thread does with it.
  struct Send {
    int u;
    const void* src;
    DType type;
    bool fresh;
    GradStore::AfterAdds then;
    int held = 0;  // micro-batches of u held, added with this one
  };
  static constexpr int kStaging = 2;
  static int64_t part_elements(DType sent) { return kPartBytes / static_cast<int64_t>(dtype_size(sent)); }
  // Elements of a part of the largest chunk, sent as `sent`.
  static int64_t staging_elements(const ZeroShape& shape, DType sent);
  // Bytes of a staging buffer: for micro-batches sent as they are rounded,
  // and for sums that do not land; 0 where nothing is staged.
  static int64_t staging_bytes(const ZeroShape& shape, const MicroBatchSums& sums, bool lands);
  // Bytes of the micro-batches held (sums.fold - 1 of each unit not on the
  // device, as sent); 0 where none are.
  static int64_t held_bytes(const ZeroShape& shape, const MicroBatchSums& sums);
  bool on_device(int u) const { return u < device_units_; }
  // Where micro-batch `row` of a group of unit u is held.
  char* held_at(int u, int row) const;

  absl::Status send(const Send& s);
  absl::Status send_parts(const Send& s);

  ZeroContext& ctx_;
  const Add add_;
  const Reread reread_;
  const Landing landing_;
  MicroBatchSums sums_;
  int device_units_ = 0;
  Buffer sum_;     // on the device, the step's sum of the units on_device
  Buffer narrow_;  // on the device, a chunk converted to the rounded type
  Buffer held_;    // in host memory, sums.fold - 1 rows of the units not on the device
  // Per unit not on the device: the adder's last add from its held rows,
  // which the next group's copies into them wait for.
  std::vector<std::shared_future<absl::Status>> folded_;
  Staging staging_[kStaging];
  int64_t next_ = 0;  // the sender's next staging buffer
  std::unique_ptr<Stream> copies_;
  // Per unit on_device: its last add to the sum, then the copy of the sum
  // to its landing.
  std::vector<std::unique_ptr<Event>> summed_;
  std::vector<int> added_;  // per unit: chunks added this step
  // A chunk buffer the sender reads: backward's (or the reduction's) last
  // write to it, on the compute stream, and the send that reads it.
  struct Reading {
    std::unique_ptr<Event> written;
    std::shared_future<absl::Status> read;
  };
  std::map<const void*, Reading> reading_;
  int then_count_ = 0;
  GradStore::AfterAdds then_, device_then_;
  TaskThread adder_;   // after the buffers: its tasks end before they go
  TaskThread sender_;  // after the adder: its tasks submit to it
  ScatterGrads sink_;  // after the threads: its last adds are submitted while they run
};

}  // namespace zerod
