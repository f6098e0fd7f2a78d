#include "offload/offload_config.h"

namespace zerod {

Tier offload_buffer_tier(const OffloadConfig& c, const Device& device) {
  return c.pin_memory ? staging_tier(device) : Tier::kHost;
}

}  // namespace zerod
