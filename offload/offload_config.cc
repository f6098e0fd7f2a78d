#include "offload/offload_config.h"

#include "runtime/core/gpu_memory.h"

namespace zerod {

Tier offload_buffer_tier(const OffloadConfig& c) {
  return c.pin_memory && cuda_device_count() > 0 ? Tier::kPinned : Tier::kHost;
}

}  // namespace zerod
