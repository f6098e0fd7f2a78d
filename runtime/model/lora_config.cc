#include "runtime/model/lora_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerod {

const char* lora_target_name(int target) {
  static constexpr const char* kNames[kNumLoraTargets] = {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"};
  return kNames[target];
}

std::string lora_targets_text(const LoraConfig& c) {
  std::string text;
  for (int k = 0; k < kNumLoraTargets; ++k) {
    if (c.targets[k]) absl::StrAppend(&text, text.empty() ? "" : ", ", lora_target_name(k));
  }
  return text;
}

int64_t lora_param_count(const GptConfig& c, const LoraConfig& lora) {
  const int64_t C = c.n_embd;
  const int64_t in_out[kNumLoraTargets] = {C + 3 * C, C + C, C + 4 * C, 4 * C + C};
  int64_t per_layer = 0;
  for (int k = 0; k < kNumLoraTargets; ++k) per_layer += lora.targets[k] ? lora.r * in_out[k] : 0;
  return c.n_layer * per_layer;
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
