// Where a ZeRO offload puts its tensors (DeepSpeed's offload_optimizer and
// offload_param sections).
#pragma once

#include <optional>
#include <string>

#include "runtime/core/memory.h"

namespace zerod {

enum class OffloadDevice { kNone, kCpu, kNvme };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::optional<std::string> nvme_path;
  bool pin_memory = true;
  int buffer_count = 4;
};

// Where an offload tier's host buffers live: pinned memory when a GPU will
// copy from them, plain host memory otherwise.
Tier offload_buffer_tier(const OffloadConfig& c);

}  // namespace zerod
