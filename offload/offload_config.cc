#include "offload/offload_config.h"

namespace zerod {

Tier offload_buffer_tier(const OffloadConfig& c, const PlanDevice& device) {
  return c.pin_memory ? device.staging_tier() : Tier::kHost;
}

}  // namespace zerod
