#include "shard/host_adds.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerod {

HostAdds::HostAdds(ZeroContext& ctx, Add add, Reread reread, Landing landing)
    : ctx_(ctx),
      add_(std::move(add)),
      reread_(std::move(reread)),
      landing_(std::move(landing)),
      adder_([&ctx] { return ctx.device.bind_thread(); }),
      sender_([&ctx] { return ctx.device.bind_thread(); }),
      sink_(ctx, *this) {}

HostAdds::~HostAdds() {
  sink_.flush().IgnoreError();
  sender_.drain().IgnoreError();
}

int64_t HostAdds::staging_elements(const ZeroShape& shape, DType sent) {
  return std::min(shape.part.largest_chunk(), part_elements(sent));
}

int64_t HostAdds::staging_bytes(const ZeroShape& shape, const MicroBatchSums& sums, bool lands) {
  const int k = sums.device_units(shape.part);
  int64_t bytes = 0;
  if (k < shape.part.num_units()) {
    bytes = staging_elements(shape, sums.rounded) * static_cast<int64_t>(dtype_size(sums.rounded));
  }
  if (k > 0 && !lands) bytes = std::max(bytes, staging_elements(shape, DType::kF32) * 4);
  return bytes;
}

int64_t HostAdds::held_bytes(const ZeroShape& shape, const MicroBatchSums& sums) {
  if (sums.fold <= 1 || sums.rounded == DType::kF32) return 0;
  const Partition& p = shape.part;
  const int64_t row = p.shard_numel() - p.shard_offset(sums.device_units(p));
  return (sums.fold - 1) * row * static_cast<int64_t>(dtype_size(sums.rounded));
}

char* HostAdds::held_at(int u, int row) const {
  const Partition& p = ctx_.part;
  const int64_t first = p.shard_offset(device_units_), row_numel = p.shard_numel() - first;
  return held_.ptr<char>() + (row * row_numel + p.shard_offset(u) - first) * dtype_size(sums_.rounded);
}

std::vector<BufferSpec> HostAdds::buffers(const ZeroShape& shape, const ZeroConfig& z, const MicroBatchSums& sums,
                                          Tier tier, bool lands) {
  const Partition& p = shape.part;
  const int k = sums.device_units(p);
  const int64_t staging = staging_bytes(shape, sums, lands), held = held_bytes(shape, sums);
  std::vector<BufferSpec> specs = {
      {"the step's gradient sum, sent to the host once", Category::kGrads, static_cast<uint64_t>(p.shard_offset(k) * 4),
       k > 0 ? 1 : 0},
      {"reduced gradients rounded for the host", Category::kComm,
       static_cast<uint64_t>(p.largest_chunk() * dtype_size(sums.rounded)),
       sums.rounded != DType::kF32 && k < p.num_units() ? 1 : 0},
      {"reduced gradients on their way to the host", Category::kOffload, static_cast<uint64_t>(staging),
       staging > 0 ? kStaging : 0, tier},
      {"micro-batch gradients held to be added in one pass", Category::kGrads, static_cast<uint64_t>(held),
       held > 0 ? 1 : 0, tier},
  };
  for (BufferSpec& b : ScatterGrads::buffers(shape, z)) specs.push_back(std::move(b));
  return specs;
}

absl::Status HostAdds::allocate(const ZeroConfig& z, const MicroBatchSums& sums, Tier tier) {
  sums_ = sums;
  device_units_ = sums.device_units(ctx_.part);
  const std::vector<BufferSpec> specs = buffers(ctx_, z, sums, tier, static_cast<bool>(landing_));
  if (specs[kDeviceSum].count > 0) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(sum_, specs[kDeviceSum]));
    for (int u = 0; u < device_units_; ++u) {
      ZEROD_ASSIGN_OR_RETURN(summed_.emplace_back(), ctx_.device.create_event());
    }
  }
  if (specs[kRounded].count > 0) ZEROD_RETURN_IF_ERROR(ctx_.alloc(narrow_, specs[kRounded]));
  if (specs[kHeld].count > 0) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(held_, specs[kHeld]));
    folded_.resize(ctx_.part.num_units());
  }
  if (specs[kStagingParts].count > 0) {
    for (Staging& s : staging_) {
      ZEROD_RETURN_IF_ERROR(ctx_.alloc(s.buf, specs[kStagingParts]));
      ZEROD_ASSIGN_OR_RETURN(s.copied, ctx_.device.create_event());
    }
  }
  ZEROD_ASSIGN_OR_RETURN(copies_, ctx_.device.create_stream());
  zero();
  return sink_.allocate(z);
}

void HostAdds::zero() {
  added_.assign(ctx_.part.num_units(), 0);
  if (sum_.data()) ctx_.device.memset(ctx_.stream, sum_.data(), 0, sum_.bytes());
}

absl::Status HostAdds::reduce() {
  // The sender submits to the adder: it is drained first.
  absl::Status s = sink_.flush();
  s.Update(sender_.drain());
  s.Update(adder_.drain());
  for (auto& [buffer, r] : reading_) r.read = {};
  // A sum on the device leaves it after its count-th micro-batch only.
  for (int u = 0; u < device_units_; ++u) {
    if (added_[u] != sums_.count) {
      s.Update(absl::InternalError(
          absl::StrCat("unit ", u, " was reduced ", added_[u], " times in a step of ", sums_.count, " micro-batches")));
    }
  }
  return s;
}

absl::Status HostAdds::started(int u) {
  // Only sends after the first of a step add to what the store holds.
  if (reread_ && !on_device(u) && added_[u] > 0) adder_.submit([this, u] { return reread_(u); });
  return absl::OkStatus();
}

absl::Status HostAdds::reusing(const Buffer& recv) {
  auto it = reading_.find(recv.data());
  if (it == reading_.end() || !it->second.read.valid()) return absl::OkStatus();
  return std::exchange(it->second.read, {}).get();
}

absl::Status HostAdds::add(int u, const Buffer& recv) {
  const int count = ++added_[u];
  GradStore::AfterAdds then = count == then_count_ ? then_ : nullptr;
  if (on_device(u)) {
    // As the in-memory store rounds and adds, on the compute stream: ahead
    // of whatever writes recv next.
    float* sum = sum_.ptr<float>() + ctx_.part.shard_offset(u);
    if (sums_.rounded != DType::kF32) {
      ctx_.kernels.round_to(ctx_.stream, sums_.rounded, recv.ptr<float>(), ctx_.part.chunk(u));
    }
    ctx_.kernels.add(ctx_.stream, sum, recv.ptr<float>(), ctx_.part.chunk(u));
    if (count < sums_.count) return absl::OkStatus();
    if (device_then_ && then) return device_then_(u, sum);
    Event& summed = *summed_[u];
    ctx_.device.record(ctx_.stream, summed);
    sender_.submit([this, &summed, s = Send{u, sum, DType::kF32, true, std::move(then)}] {
      ctx_.device.wait(*copies_, summed);
      return send(s);
    });
    return absl::OkStatus();
  }
  // Each micro-batch's chunk, read by the sender, once the compute stream
  // has written it, until its job is done. Of a group of `fold`, the
  // micro-batches before the last (and the step's last) are held.
  const int fold = held_.data() ? sums_.fold : 1;
  const int row = (count - 1) % fold;
  const bool held = row + 1 < fold && count < sums_.count;
  Reading& r = reading_[recv.data()];
  if (!r.written) {
    ZEROD_ASSIGN_OR_RETURN(r.written, ctx_.device.create_event());
  }
  ctx_.device.record(ctx_.stream, *r.written);
  r.read = sender_.submit([this, u, src = recv.data(), &written = *r.written, fresh = count - row == 1, row, held,
                           then = std::move(then)]() -> absl::Status {
    ctx_.device.wait(*copies_, written);
    const void* sent = src;
    if (sums_.rounded != DType::kF32) {
      ctx_.kernels.convert_from_f32(*copies_, sums_.rounded, static_cast<const float*>(src), narrow_.data(),
                                    ctx_.part.chunk(u));
      sent = narrow_.data();
    }
    if (!held) {
      ZEROD_RETURN_IF_ERROR(send({u, sent, sums_.rounded, fresh, then, row}));
    } else {
      // The rows are the last group's until its adds are done.
      if (row == 0 && folded_[u].valid()) ZEROD_RETURN_IF_ERROR(std::exchange(folded_[u], {}).get());
      ctx_.device.copy(*copies_, held_at(u, row), sent, ctx_.part.chunk(u) * dtype_size(sums_.rounded));
    }
    // What was read of recv (the conversion, or the copies) is done.
    return ctx_.device.synchronize(*copies_);
  });
  return absl::OkStatus();
}

absl::Status HostAdds::send(const Send& s) {
  // A sum from the device lands whole; anything else is added on the host.
  if (!on_device(s.u) || !landing_) return send_parts(s);
  float* dst = landing_(s.u);
  ctx_.device.copy(*copies_, dst, s.src, ctx_.part.chunk(s.u) * sizeof(float));
  Event& landed = *summed_[s.u];  // the copy stream's wait for it is enqueued: it may be recorded again
  ctx_.device.record(*copies_, landed);
  adder_.submit([this, &landed, s, dst] {
    ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(landed));
    return s.then ? s.then(s.u, dst) : absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status HostAdds::send_parts(const Send& s) {
  const int64_t chunk = ctx_.part.chunk(s.u), part = part_elements(s.type);
  const size_t size = dtype_size(s.type);
  for (int64_t start = 0; start < chunk; start += part) {
    const int64_t n = std::min(part, chunk - start);
    Staging& st = staging_[next_++ % kStaging];
    if (st.added.valid()) ZEROD_RETURN_IF_ERROR(st.added.get());  // the adder is done with it
    ctx_.device.copy(*copies_, st.buf.data(), static_cast<const char*>(s.src) + start * size, n * size);
    ctx_.device.record(*copies_, *st.copied);
    GradStore::AfterAdds then = start + n == chunk ? s.then : nullptr;
    st.added = adder_.submit(
        [this, &st, u = s.u, start, n, type = s.type, fresh = s.fresh, held = s.held, then = std::move(then)] {
          ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(*st.copied));
          // The group's held micro-batches (their copies done before this
          // send began), then this one.
          std::vector<const void*> srcs;
          for (int row = 0; row < held; ++row) srcs.push_back(held_at(u, row) + start * dtype_size(type));
          srcs.push_back(st.buf.host<char>());
          ZEROD_ASSIGN_OR_RETURN(const float* sum, add_(u, start, srcs, type, n, fresh));
          return then ? then(u, sum) : absl::OkStatus();
        });
    if (s.held > 0) folded_[s.u] = st.added;
  }
  return absl::OkStatus();
}

}  // namespace zerod
