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

uint64_t DeviceSteps::slot_bytes(int64_t part_elements, bool host_sums, size_t working_bytes) {
  // The most a part's arrays take: fp32 masters, m and v (an 8-bit part's
  // codes and absmax values take less), a sum from the host and the
  // working copy for the host, each from an aligned start.
  return (host_sums ? 4 : 3) * align_up(part_elements * sizeof(float)) + align_up(part_elements * working_bytes);
}

std::vector<BufferSpec> DeviceSteps::buffers(const ZeroShape& shape, int kept, bool working_on_host,
                                             int64_t part_elements) {
  const int64_t part = part_elements > 0 ? part_elements : DeviceSteps::part_elements(shape);
  const size_t working = working_on_host ? dtype_size(shape.dtype) : 0;
  return {{"masters and states updated on the device, in parts", Category::kOptimizer, slot_bytes(part, false, working),
           kept > 0 ? kSlots : 0},
          {"masters, states and sums from the host updated on the device, in parts", Category::kOptimizer,
           slot_bytes(part, true, working), kept < shape.part.num_units() ? kSlots : 0}};
}

std::vector<bool> DeviceSteps::share(const std::vector<UnitBytes>& units, int kept) {
  const int count = static_cast<int>(units.size());
  std::vector<bool> takes(count, false);
  int64_t device = 0, host = 0;
  for (int u = 0; u < kept; ++u) device += units[u].states;
  for (int u = count - 1; u >= kept; --u) {
    const UnitBytes& b = units[u];
    const int64_t up = b.states + b.numel * 4, on_host = 2 * b.states + b.numel * (4 + b.working);
    takes[u] = device + up <= host + on_host;
    if (takes[u]) {
      device += up;
    } else {
      host += on_host;
    }
  }
  return takes;
}

absl::StatusOr<std::unique_ptr<DeviceSteps>> DeviceSteps::create(ZeroContext& ctx, const Optimizer& optimizer,
                                                                 const std::vector<std::pair<int, int>>& unit_pieces,
                                                                 int kept, bool working_on_host,
                                                                 int64_t part_elements) {
  if (part_elements % kQuantBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a part of ", part_elements, " elements is not whole blocks of ", kQuantBlock));
  }
  std::unique_ptr<DeviceSteps> d(new DeviceSteps(ctx, optimizer));
  Device& dev = ctx.device;
  d->part_elements_ = part_elements > 0 ? part_elements : DeviceSteps::part_elements(ctx);
  d->working_on_host_ = working_on_host;
  std::vector<UnitBytes> units(unit_pieces.size());
  for (size_t u = 0; u < units.size(); ++u) {
    units[u].working = static_cast<int>(dtype_size(ctx.dtype));
    for (int k = unit_pieces[u].first; k < unit_pieces[u].second; ++k) {
      units[u].numel += ctx.owned[k].numel;
      for (const Optimizer::Span& a : optimizer.part_arrays(k, 0, ctx.owned[k].numel)) units[u].states += a.bytes;
    }
  }
  d->takes_ = share(units, kept);
  const std::vector<BufferSpec> lanes = buffers(ctx, kept, working_on_host, d->part_elements_);
  for (int i = 0; i < 2; ++i) {
    if (lanes[i].count > 0) ZEROD_RETURN_IF_ERROR(d->create_lane(d->lanes_[i], lanes[i]));
  }
  ZEROD_ASSIGN_OR_RETURN(d->ready_, dev.create_event());
  return d;
}

absl::Status DeviceSteps::create_lane(Lane& lane, const BufferSpec& slots) {
  Device& dev = ctx_.device;
  for (Slot& s : lane.slots) {
    ZEROD_ASSIGN_OR_RETURN(s.buf, allocate_spec(dev, slots));
    ZEROD_ASSIGN_OR_RETURN(s.uploaded, dev.create_event());
    ZEROD_ASSIGN_OR_RETURN(s.updated, dev.create_event());
    ZEROD_ASSIGN_OR_RETURN(s.downloaded, dev.create_event());
  }
  ZEROD_ASSIGN_OR_RETURN(lane.up, dev.create_stream());
  ZEROD_ASSIGN_OR_RETURN(lane.update, dev.create_stream());
  ZEROD_ASSIGN_OR_RETURN(lane.down, dev.create_stream());
  ZEROD_ASSIGN_OR_RETURN(lane.done, dev.create_event());
  return absl::OkStatus();
}

DeviceSteps::~DeviceSteps() {
  for (Lane& lane : lanes_) {
    for (Stream* s : {lane.up.get(), lane.update.get(), lane.down.get()}) {
      if (s) ctx_.device.synchronize(*s).IgnoreError();
    }
  }
}

void DeviceSteps::enqueue(int first, int last, const float* grads, bool grads_on_host,
                          const std::vector<void*>& working, float lr, int64_t step, float grad_scale) {
  if (first == last) return;  // nothing of the unit is this rank's
  Lane& lane = lanes_[grads_on_host];
  std::lock_guard<std::mutex> lock(lane.mu);
  Device& dev = ctx_.device;
  // The updates read the sums the compute stream has made (each event is
  // waited for as soon as it is recorded, so one serves every call). A sum
  // on the host is complete: backward is done with the unit's working copy.
  if (!grads_on_host) {
    dev.record(ctx_.stream, *ready_);
    dev.wait(*lane.update, *ready_);
  }
  const size_t working_size = dtype_size(ctx_.dtype);
  const int64_t at_first = ctx_.owned[first].shard_offset;
  for (int k = first; k < last; ++k) {
    const ShardSegment& seg = ctx_.owned[k];
    for (int64_t start = 0; start < seg.numel; start += part_elements_) {
      const int64_t n = std::min(part_elements_, seg.numel - start);
      Slot& slot = lane.slots[lane.next++ % kSlots];
      const std::vector<Optimizer::Span> arrays = optimizer_.part_arrays(k, start, n);
      std::vector<void*> at;
      uint64_t offset = 0;
      for (const Optimizer::Span& a : arrays) {
        at.push_back(slot.buf.ptr<char>() + offset);
        offset += align_up(a.bytes);
      }
      const float* grad = grads + (seg.shard_offset - at_first) + start;
      void* param16 = static_cast<char*>(working[k]) + start * working_size;
      // Up once the slot's last part is back; updated once it is up; back
      // once updated.
      dev.wait(*lane.up, *slot.downloaded);
      for (size_t i = 0; i < arrays.size(); ++i) dev.copy(*lane.up, at[i], arrays[i].data, arrays[i].bytes);
      if (grads_on_host) {
        float* up = reinterpret_cast<float*>(slot.buf.ptr<char>() + offset);
        dev.copy(*lane.up, up, grad, n * sizeof(float));
        grad = up;
        offset += align_up(n * sizeof(float));
      }
      dev.record(*lane.up, *slot.uploaded);
      dev.wait(*lane.update, *slot.uploaded);
      void* written = working_on_host_ ? slot.buf.ptr<char>() + offset : param16;
      optimizer_.step_part(ctx_.kernels, *lane.update, k, n, at, grad, written, lr, step, grad_scale);
      dev.record(*lane.update, *slot.updated);
      dev.wait(*lane.down, *slot.updated);
      for (size_t i = 0; i < arrays.size(); ++i) dev.copy(*lane.down, arrays[i].data, at[i], arrays[i].bytes);
      if (working_on_host_) dev.copy(*lane.down, param16, written, n * working_size);
      dev.record(*lane.down, *slot.downloaded);
      ++lane.parts;
    }
  }
}

absl::Status DeviceSteps::finish() {
  absl::Status s;
  for (Lane& lane : lanes_) {
    if (!lane.update) continue;
    ctx_.device.record(*lane.update, *lane.done);
    ctx_.device.wait(ctx_.stream, *lane.done);
    s.Update(ctx_.device.synchronize(*lane.down));
  }
  return s;
}

}  // namespace zerod
