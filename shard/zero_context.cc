#include "shard/zero_context.h"

#include <chrono>

namespace zerod {

ZeroShape::ZeroShape(const GptLayout& layout, int stage, int world_size, int rank, DType dtype, Category params)
    : layout(layout),
      part(layout, stage == 0 ? 1 : world_size),
      owner(stage == 0 ? 0 : rank),
      owned(owned_segments(layout, part, owner)),
      dtype(dtype),
      params(params),
      packed(false) {}

namespace {

std::vector<ShardSegment> unit_segments(const Partition& part, int rank) {
  std::vector<ShardSegment> owned;
  for (int u = 0; u < part.num_units(); ++u) {
    const Partition::Range r = part.owned(u, rank);
    if (r.end > r.begin) {
      owned.push_back({r.begin, part.shard_offset(u), r.end - r.begin, /*decay=*/false, u, part.unit_numel(u)});
    }
  }
  return owned;
}

}  // namespace

ZeroShape::ZeroShape(const GptLayout& layout, std::vector<int64_t> unit_begin, int world_size, int rank, DType dtype,
                     Category params)
    : layout(layout),
      part(std::move(unit_begin), world_size),
      owner(rank),
      owned(unit_segments(part, rank)),
      dtype(dtype),
      params(params),
      packed(true) {}

ZeroContext::ZeroContext(const GptLayout& layout, int stage, DType dtype, Communicator& comm, Device& device,
                         Kernels& kernels, Device& host, Kernels& host_kernels, Category params)
    : ZeroContext(ZeroShape(layout, stage, comm.world_size(), comm.rank(), dtype, params), comm, device, kernels, host,
                  host_kernels) {}

ZeroContext::ZeroContext(ZeroShape shape, Communicator& comm, Device& device, Kernels& kernels, Device& host,
                         Kernels& host_kernels)
    : ZeroShape(std::move(shape)),
      comm(comm),
      device(device),
      kernels(kernels),
      stream(device.compute_stream()),
      host(host),
      host_kernels(host_kernels) {
  operands = kernels.operand_type();
}

absl::Status ZeroContext::alloc(Buffer& b, int64_t bytes, Category c) const {
  ZEROD_ASSIGN_OR_RETURN(b, device.allocate(bytes, c));
  device.memset(stream, b.data(), 0, bytes);
  return absl::OkStatus();
}

absl::Status ZeroContext::alloc(Buffer& b, const BufferSpec& spec) const {
  if (!spec.tier) return alloc(b, static_cast<int64_t>(spec.bytes), spec.category);
  ZEROD_ASSIGN_OR_RETURN(b, device.allocate(spec.bytes, spec.category, *spec.tier));
  return absl::OkStatus();
}

int64_t ZeroContext::padded_index(const ShardSegment& s) const {
  return part.padded_offset(s.unit) + owner * part.chunk(s.unit) + (s.shard_offset - part.shard_offset(s.unit));
}

CommType comm_type(DType t) {
  switch (t) {
    case DType::kBF16:
      return CommType::kBF16;
    case DType::kF16:
      return CommType::kF16;
    default:
      return CommType::kF32;
  }
}

absl::Status timed_wait(Work& w, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = w.wait();
  *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

absl::Status wait_all(std::vector<WorkPtr>& works) {
  absl::Status first;
  for (WorkPtr& w : works) first.Update(w->wait());
  works.clear();
  return first;
}

}  // namespace zerod
