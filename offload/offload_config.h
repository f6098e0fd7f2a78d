// Where a ZeRO offload puts its tensors (DeepSpeed's offload_optimizer and
// offload_param sections).
#pragma once

#include <optional>
#include <string>

#include "runtime/core/device.h"

namespace zerod {

enum class OffloadDevice { kNone, kCpu, kNvme };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::optional<std::string> nvme_path;
  bool pin_memory = true;
  int buffer_count = 4;
  // offload_optimizer only (DeepSpeed's SuperOffload switch): with clipping
  // or a loss scale, the host still updates each unit during backward,
  // keeping what it overwrites so that the update can be undone.
  bool super_offload = false;
};

// Where an offload tier's host buffers live: pinned memory when a GPU will
// copy to and from them (pin_memory, and `device` is a CUDA GPU), plain
// host memory otherwise.
Tier offload_buffer_tier(const OffloadConfig& c, const PlanDevice& device);

}  // namespace zerod
