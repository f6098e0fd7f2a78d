#include "runtime/model/lora_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerod {

const char* lora_target_name(int target) {
  static constexpr const char* kNames[kNumLoraTargets] = {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"};
  return kNames[target];
}

absl::Status validate_lora_config(const LoraConfig& c) {
  if (c.r < 1) return absl::InvalidArgumentError(absl::StrCat("model.lora.r must be at least 1, got ", c.r));
  if (!(c.alpha > 0) || !std::isfinite(c.alpha)) {
    return absl::InvalidArgumentError(absl::StrCat("model.lora.alpha must be positive, got ", c.alpha));
  }
  if (!(c.dropout >= 0 && c.dropout < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("model.lora.dropout must be in [0, 1), got ", c.dropout));
  }
  if (std::ranges::none_of(c.targets, [](bool t) { return t; })) {
    return absl::InvalidArgumentError("model.lora.target_modules names no module");
  }
  return absl::OkStatus();
}

}  // namespace zerod
