// Where a ZeRO offload puts its tensors (DeepSpeed's offload_optimizer and
// offload_param sections).
#pragma once

#include <optional>
#include <string>

namespace zerod {

enum class OffloadDevice { kNone, kCpu, kNvme };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::optional<std::string> nvme_path;
  bool pin_memory = true;
  int buffer_count = 4;
};

}  // namespace zerod
