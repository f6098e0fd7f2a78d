#include "shard/upload_ring.h"

#include <algorithm>

namespace zerod {
namespace {

// Two parts of 4 MiB: the conversion of one runs while the other is copied.
constexpr int kParts = 2;
constexpr uint64_t kPartBytes = uint64_t{4} << 20;

}  // namespace

BufferSpec UploadRing::buffers(Tier tier) { return {"upload ring", Category::kWorkspace, kPartBytes, kParts, tier}; }

absl::Status UploadRing::allocate() {
  ZEROD_ASSIGN_OR_RETURN(stream_, device_.create_stream());
  ZEROD_ASSIGN_OR_RETURN(start_, device_.create_event());
  const BufferSpec spec = buffers(tier_);
  for (int i = 0; i < spec.count; ++i) {
    Part p;
    ZEROD_ASSIGN_OR_RETURN(p.buf, device_.allocate(spec.bytes, spec.category, *spec.tier));
    ZEROD_ASSIGN_OR_RETURN(p.copied, device_.create_event());
    parts_.push_back(std::move(p));
  }
  return absl::OkStatus();
}

absl::Status UploadRing::write(void* dst, DType dtype, const float* src, int64_t n) {
  Stream& compute = device_.compute_stream();
  // Memory the host reaches is written in place, once the compute stream is
  // done with it.
  if (device_.host_visible()) {
    ZEROD_RETURN_IF_ERROR(device_.synchronize(compute));
    convert_from_f32(dtype, src, dst, n);
    return absl::OkStatus();
  }
  if (parts_.empty()) ZEROD_RETURN_IF_ERROR(allocate());
  if (!open_) {
    device_.record(compute, *start_);
    device_.wait(*stream_, *start_);
    open_ = true;
  }
  const int64_t ds = dtype_size(dtype);
  const int64_t per_part = static_cast<int64_t>(kPartBytes) / ds;
  for (int64_t at = 0; at < n; at += per_part) {
    const int64_t m = std::min(per_part, n - at);
    Part& p = parts_[next_++ % parts_.size()];
    ZEROD_RETURN_IF_ERROR(device_.synchronize(*p.copied));  // its last copy has read it
    convert_from_f32(dtype, src + at, p.buf.host<char>(), m);
    device_.copy(*stream_, static_cast<char*>(dst) + at * ds, p.buf.data(), m * ds);
    device_.record(*stream_, *p.copied);
  }
  return absl::OkStatus();
}

absl::Status UploadRing::flush() {
  if (!open_) return absl::OkStatus();
  open_ = false;
  return device_.synchronize(*stream_);
}

}  // namespace zerod
