// What every ZeRO store of one rank works with: the model's layout, its
// partition over the ranks and this rank's place in it, the communicator,
// the device and kernel table the model computes with, and the host's (the
// CPU, where an offloaded optimizer updates its shard).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "runtime/core/device.h"
#include "runtime/core/memory_plan.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/gpt_layout.h"
#include "runtime/model/weights.h"
#include "shard/partition.h"

namespace zerod {

// What a rank's stores are sized by, without a device or a communicator:
// what their plan functions take, for a rank that need not exist yet.
struct ZeroShape {
  ZeroShape(const GptLayout& layout, int stage, int world_size, int rank, DType dtype,
            Category params = Category::kParams);
  // Stage 3 over units held in a form of their own (NF4's packed layers,
  // unpacked by the store's LayerUnpack; the embeddings and final norm as
  // operands, the table's type, packed into the same elements): `unit_begin`
  // as Partition takes it, in elements of `dtype`; a rank owns a segment of
  // each unit, its chunk's real elements. `layout` is still the model's.
  ZeroShape(const GptLayout& layout, std::vector<int64_t> unit_begin, int world_size, int rank, DType dtype,
            Category params);

  const GptLayout& layout;
  const Partition part;  // a world of one under stage 0: every rank owns everything
  const int owner;       // this rank's index in part
  const std::vector<ShardSegment> owned;
  const DType dtype;      // of the working parameters
  const Category params;  // what the working parameters count as (kFrozen for weights not trained)
  const bool packed;      // units held in a form of their own (the constructor above)
  // The kernel table's operand type (kernels.h): weights of another type
  // reach the model converted (weights.h's staging). A context's is its
  // table's; a plan's, its settings'.
  DType operands = DType::kF32;
};

struct ZeroContext : ZeroShape {
  ZeroContext(const GptLayout& layout, int stage, DType dtype, Communicator& comm, Device& device, Kernels& kernels,
              Device& host, Kernels& host_kernels, Category params = Category::kParams);
  ZeroContext(ZeroShape shape, Communicator& comm, Device& device, Kernels& kernels, Device& host,
              Kernels& host_kernels);

  // A zeroed buffer on the device (the memset enqueued on the stream).
  absl::Status alloc(Buffer& b, int64_t bytes, Category c) const;
  // The buffer `spec` describes: zeroed as above in the device's memory, as
  // it comes elsewhere (host memory the host fills).
  absl::Status alloc(Buffer& b, const BufferSpec& spec) const;
  Converter converter() const { return {kernels, stream}; }
  // Where owned segment s starts in the padded full buffer.
  int64_t padded_index(const ShardSegment& s) const;

  Communicator& comm;
  Device& device;
  Kernels& kernels;
  Stream& stream;  // the device's compute stream
  Device& host;    // synchronous: its work is done when enqueued
  Kernels& host_kernels;
  // Seconds blocked on the collectives of forward and backward (stage 2/3
  // gathers, reduce-scatters and the flush after them): the communication
  // that overlap did not hide.
  double pass_wait_s = 0;
};

// `store`, once its allocate(args...) has succeeded, as an Interface.
template <class Interface, class Store, class... Args>
absl::StatusOr<std::unique_ptr<Interface>> allocated(std::unique_ptr<Store> store, Args&&... args) {
  ZEROD_RETURN_IF_ERROR(store->allocate(std::forward<Args>(args)...));
  return std::unique_ptr<Interface>(std::move(store));
}

CommType comm_type(DType t);
// Waits for `w`, adding the time blocked to *seconds.
absl::Status timed_wait(Work& w, double* seconds);
// Waits for every work item (also after one fails), returning the first failure.
absl::Status wait_all(std::vector<WorkPtr>& works);

}  // namespace zerod
