// LoRA's settings (model.lora): which of GPT-2's products get adapters, of
// what rank, and their scale, as PEFT's LoraConfig names them.
#pragma once

#include <array>
#include <cmath>
#include <string>

#include "runtime/core/status.h"
#include "runtime/model/gpt_config.h"

namespace zerod {

// The products adapters can sit beside, by PEFT's target_modules names for
// GPT-2: "c_attn", "attn.c_proj", "c_fc", "mlp.c_proj".
enum LoraTarget : int { kLoraCAttn, kLoraAttnCProj, kLoraCFc, kLoraMlpCProj, kNumLoraTargets };
const char* lora_target_name(int target);

struct LoraConfig {
  int r = 8;
  double alpha = 8;
  double dropout = 0;
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
  std::array<bool, kNumLoraTargets> targets{true, false, false, false};  // PEFT's GPT-2 default: c_attn

  float scale() const { return static_cast<float>(use_rslora ? alpha / std::sqrt(double(r)) : alpha / r); }
};

// The adapted products' names, ", "-separated ("c_attn, mlp.c_proj").
std::string lora_targets_text(const LoraConfig& c);

// The adapters' parameters for a model of shape c: r * (in + out) a target
// product a layer.
int64_t lora_param_count(const GptConfig& c, const LoraConfig& lora);

// r at least 1, alpha positive and finite, dropout in [0, 1), a target.
absl::Status validate_lora_config(const LoraConfig& c);

}  // namespace zerod
