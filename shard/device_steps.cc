#include "shard/device_steps.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

// Arrays of a part start on this boundary in its slot.
constexpr uint64_t kArrayAlign = 256;
uint64_t align_up(uint64_t bytes) { return (bytes + kArrayAlign - 1) / kArrayAlign * kArrayAlign; }

}  // namespace

int64_t DeviceSteps::part_elements(const ZeroShape& shape) {
  int64_t largest = 0;
  for (const ShardSegment& s : shape.owned) largest = std::max(largest, s.numel);
  const int64_t blocks = (std::min(largest, kPartElements) + kQuantBlock - 1) / kQuantBlock;
  return std::max<int64_t>(blocks, 1) * kQuantBlock;
}

uint64_t DeviceSteps::slot_bytes(int64_t part_elements) {
  // The most a part's arrays take: fp32 masters, m and v (an 8-bit part's
  // codes and absmax values take less), each from an aligned start.
  return 3 * align_up(part_elements * sizeof(float));
}

void DeviceSteps::plan(const ZeroShape& shape, MemoryPlan& plan) {
  plan.add_device("masters and states updated on the device, in parts", Category::kOptimizer,
                  slot_bytes(part_elements(shape)), Phase::kBuild, true, kSlots);
}

absl::StatusOr<std::unique_ptr<DeviceSteps>> DeviceSteps::create(ZeroContext& ctx, const Optimizer& optimizer,
                                                                 int64_t part_elements) {
  if (part_elements % kQuantBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a part of ", part_elements, " elements is not whole blocks of ",
                                                   kQuantBlock));
  }
  std::unique_ptr<DeviceSteps> d(new DeviceSteps(ctx, optimizer));
  Device& dev = ctx.device;
  d->part_elements_ = part_elements > 0 ? part_elements : DeviceSteps::part_elements(ctx);
  for (Slot& s : d->slots_) {
    ZEROD_ASSIGN_OR_RETURN(s.buf, dev.allocate(slot_bytes(d->part_elements_), Category::kOptimizer));
    ZEROD_ASSIGN_OR_RETURN(s.uploaded, dev.create_event());
    ZEROD_ASSIGN_OR_RETURN(s.updated, dev.create_event());
    ZEROD_ASSIGN_OR_RETURN(s.downloaded, dev.create_event());
  }
  ZEROD_ASSIGN_OR_RETURN(d->up_, dev.create_stream());
  ZEROD_ASSIGN_OR_RETURN(d->update_, dev.create_stream());
  ZEROD_ASSIGN_OR_RETURN(d->down_, dev.create_stream());
  ZEROD_ASSIGN_OR_RETURN(d->ready_, dev.create_event());
  ZEROD_ASSIGN_OR_RETURN(d->done_, dev.create_event());
  return d;
}

DeviceSteps::~DeviceSteps() {
  for (Stream* s : {up_.get(), update_.get(), down_.get()}) {
    if (s) ctx_.device.synchronize(*s).IgnoreError();
  }
}

void DeviceSteps::enqueue(int first, int last, const float* grads, const std::vector<void*>& working, float lr,
                          int64_t step, float grad_scale) {
  Device& dev = ctx_.device;
  // The updates read the sums the compute stream has made (each event is
  // waited for as soon as it is recorded, so one serves every call).
  dev.record(ctx_.stream, *ready_);
  dev.wait(*update_, *ready_);
  const size_t working_size = dtype_size(ctx_.dtype);
  const int64_t at_first = ctx_.owned[first].shard_offset;
  for (int k = first; k < last; ++k) {
    const ShardSegment& seg = ctx_.owned[k];
    for (int64_t start = 0; start < seg.numel; start += part_elements_) {
      const int64_t n = std::min(part_elements_, seg.numel - start);
      Slot& slot = slots_[next_++ % kSlots];
      const std::vector<Optimizer::Span> arrays = optimizer_.part_arrays(k, start, n);
      std::vector<void*> at;
      uint64_t offset = 0;
      for (const Optimizer::Span& a : arrays) {
        at.push_back(slot.buf.ptr<char>() + offset);
        offset += align_up(a.bytes);
      }
      // Up once the slot's last part is back; updated once it is up; back
      // once updated.
      dev.wait(*up_, *slot.downloaded);
      for (size_t i = 0; i < arrays.size(); ++i) dev.copy(*up_, at[i], arrays[i].data, arrays[i].bytes);
      dev.record(*up_, *slot.uploaded);
      dev.wait(*update_, *slot.uploaded);
      optimizer_.step_part(ctx_.kernels, *update_, k, n, at, grads + (seg.shard_offset - at_first) + start,
                           static_cast<char*>(working[k]) + start * working_size, lr, step, grad_scale);
      dev.record(*update_, *slot.updated);
      dev.wait(*down_, *slot.updated);
      for (size_t i = 0; i < arrays.size(); ++i) dev.copy(*down_, arrays[i].data, at[i], arrays[i].bytes);
      dev.record(*down_, *slot.downloaded);
      ++parts_;
    }
  }
}

absl::Status DeviceSteps::finish() {
  ctx_.device.record(*update_, *done_);
  ctx_.device.wait(ctx_.stream, *done_);
  return ctx_.device.synchronize(*down_);
}

}  // namespace zerod
