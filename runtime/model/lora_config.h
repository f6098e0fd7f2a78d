// LoRA's settings (model.lora): which of the model's products get
// adapters, of what rank, and their scale, as PEFT's LoraConfig names them.
#pragma once

#include <array>
#include <cmath>
#include <string>

#include "runtime/core/status.h"
#include "runtime/model/gpt_config.h"

namespace zerod {

// The products adapters can sit beside, by PEFT's target_modules names: a
// target is its index among its model's. GPT-2's four are its Conv1D
// products; a Llama's seven are transformers' nn.Linear ones, q, k and v
// sharing zerod's qkv product and gate and up its first MLP product.
enum Gpt2LoraTarget : int { kLoraCAttn, kLoraAttnCProj, kLoraCFc, kLoraMlpCProj };
enum LlamaLoraTarget : int { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown };
inline constexpr int kNumLoraTargets = 7;  // the most any model has
// How many an architecture has (4, 7), and target t's name there.
int lora_targets_of(Arch a);
const char* lora_target_name(Arch a, int target);

// Where target t of a model of shape c adds: its product takes `in`
// columns and makes `width`, of which the adapter's output is
// [col0, col0 + out).
struct LoraTargetDims {
  int in, col0, out, width;
};
LoraTargetDims lora_target_dims(const GptConfig& c, int target);

struct LoraConfig {
  int r = 8;
  double alpha = 8;
  double dropout = 0;
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
  // PEFT's defaults: GPT-2's c_attn; a Llama's q_proj and v_proj (the job
  // config's reader sets them).
  std::array<bool, kNumLoraTargets> targets{true, false, false, false, false, false, false};

  float scale() const { return static_cast<float>(use_rslora ? alpha / std::sqrt(double(r)) : alpha / r); }
};

// The adapted products' names, ", "-separated ("c_attn, mlp.c_proj").
std::string lora_targets_text(const LoraConfig& c, Arch a);

// The adapters' parameters for a model of shape c: r * (in + out) a target
// product a layer.
int64_t lora_param_count(const GptConfig& c, const LoraConfig& lora);

// r at least 1, alpha positive and finite, dropout in [0, 1), a target,
// and only targets architecture `a` has.
absl::Status validate_lora_config(const LoraConfig& c, Arch a);
// r no larger than each target's narrower side (min(in, out)) in a model of
// shape m (a valid one): beyond it an adapter is a full-rank update with
// extra weights.
absl::Status validate_lora_rank(const LoraConfig& c, const GptConfig& m);

}  // namespace zerod
