#include "runtime/model/lora_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerod {

int lora_targets_of(Arch a) { return a == Arch::kLlama ? 7 : 4; }

const char* lora_target_name(Arch a, int target) {
  static constexpr const char* kGpt2[] = {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"};
  static constexpr const char* kLlama[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return a == Arch::kLlama ? kLlama[target] : kGpt2[target];
}

LoraTargetDims lora_target_dims(const GptConfig& c, int target) {
  const int C = c.n_embd;
  if (!c.llama()) {
    const LoraTargetDims gpt2[] = {{C, 0, 3 * C, 3 * C}, {C, 0, C, C}, {C, 0, 4 * C, 4 * C}, {4 * C, 0, C, C}};
    return gpt2[target];
  }
  const int q = c.n_head * c.head_dim(), kv = c.kv_heads() * c.head_dim(), W = c.qkv_width(), F = c.ffn_hidden;
  const LoraTargetDims llama[] = {{C, 0, q, W},  {C, q, kv, W},      {C, q + kv, kv, W}, {C, 0, C, C},
                                  {C, 0, F, 2 * F}, {C, F, F, 2 * F}, {F, 0, C, C}};
  return llama[target];
}

std::string lora_targets_text(const LoraConfig& c, Arch a) {
  std::string text;
  for (int k = 0; k < lora_targets_of(a); ++k) {
    if (c.targets[k]) absl::StrAppend(&text, text.empty() ? "" : ", ", lora_target_name(a, k));
  }
  return text;
}

int64_t lora_param_count(const GptConfig& c, const LoraConfig& lora) {
  int64_t per_layer = 0;
  for (int k = 0; k < lora_targets_of(c.arch); ++k) {
    const LoraTargetDims d = lora_target_dims(c, k);
    per_layer += lora.targets[k] ? int64_t(lora.r) * (d.in + d.out) : 0;
  }
  return c.n_layer * per_layer;
}

absl::Status validate_lora_config(const LoraConfig& c, Arch a) {
  if (c.r < 1) return absl::InvalidArgumentError(absl::StrCat("model.lora.r must be at least 1, got ", c.r));
  if (!(c.alpha > 0) || !std::isfinite(c.alpha)) {
    return absl::InvalidArgumentError(absl::StrCat("model.lora.alpha (lora_alpha) must be positive, got ", c.alpha));
  }
  if (!(c.dropout >= 0 && c.dropout < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.lora.dropout (lora_dropout) must be in [0, 1), got ", c.dropout));
  }
  if (std::ranges::none_of(c.targets, [](bool t) { return t; })) {
    return absl::InvalidArgumentError("model.lora.target_modules names no module");
  }
  for (int k = lora_targets_of(a); k < kNumLoraTargets; ++k) {
    if (c.targets[k]) {
      return absl::InvalidArgumentError(absl::StrCat("model.lora.target_modules: target ", k, " is not one of ",
                                                     arch_name(a), "'s"));
    }
  }
  return absl::OkStatus();
}

absl::Status validate_lora_rank(const LoraConfig& c, const GptConfig& m) {
  for (int t = 0; t < lora_targets_of(m.arch); ++t) {
    const LoraTargetDims d = lora_target_dims(m, t);
    if (c.targets[t] && c.r > std::min(d.in, d.out)) {
      return absl::InvalidArgumentError(absl::StrCat("model.lora.r is ", c.r, ", larger than ",
                                                     lora_target_name(m.arch, t), " [", d.in, " -> ", d.out,
                                                     "] allows (", std::min(d.in, d.out), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace zerod
