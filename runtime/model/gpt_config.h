// Decoder shapes: GPT-2's and the Llama family's (Llama 2/3, Mistral,
// Qwen2), the named presets and custom sizes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/core/status.h"

namespace zerod {

// GPT-2: learned positions, LayerNorm with biases, fused qkv, GELU MLP of
// 4C, the head tied to wte. Llama: rotary positions, RMSNorm without
// biases, grouped-query attention, a SwiGLU MLP, no biases but Qwen2's
// q/k/v ones, the head tied or its own.
enum class Arch { kGpt2, kLlama };
const char* arch_name(Arch a);

// Llama 3's rope_scaling (transformers' "rope_type": "llama3"): the
// frequencies whose wavelength passes original_max_position /
// low_freq_factor are divided by `factor`, those under original /
// high_freq_factor kept, those between blended. factor 0: none.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_position = 8192;
};

struct GptConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int vocab_size = 0;
  int block_size = 0;  // positions (Llama: max_position_embeddings)
  Arch arch = Arch::kGpt2;
  // The Llama family's; GPT-2 keeps the defaults.
  int n_kv_head = 0;   // key/value heads; 0: n_head
  int ffn_hidden = 0;  // the MLP's width (intermediate_size)
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;       // RMSNorm's (GPT-2's LayerNorm keeps kLayerNormEps)
  bool tie_embeddings = true;   // the head is embed_tokens
  bool qkv_bias = false;        // Qwen2

  bool llama() const { return arch == Arch::kLlama; }
  int head_dim() const { return n_embd / n_head; }
  int kv_heads() const { return n_kv_head ? n_kv_head : n_head; }
  // Columns of the fused q, k and v product: 3C, or (NH + 2 KV) hd.
  int qkv_width() const { return llama() ? (n_head + 2 * kv_heads()) * head_dim() : 3 * n_embd; }
  // The MLP's hidden width (4C for GPT-2), and its first product's columns
  // (Llama's gate and up side by side).
  int mlp_width() const { return llama() ? ffn_hidden : 4 * n_embd; }
  int mlp_in_width() const { return llama() ? 2 * ffn_hidden : 4 * n_embd; }
};

// "gpt2-tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"; "llama-tiny",
// "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b",
// "mistral-7b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-72b".
absl::StatusOr<GptConfig> gpt_preset(const std::string& name);
// Positive sizes, n_embd divisible by n_head; a Llama's n_head divisible
// by its n_kv_head, an even head_dim, an MLP width, rope_theta and
// norm_eps positive, a rope_scaling that makes sense. GPT-2 has none of
// the Llama fields set.
absl::Status validate_gpt_config(const GptConfig& c);
// The shape as a checkpoint's manifest and the run's start event record
// it: GPT-2's five sizes, and a Llama's fields beside them. From JSON:
// throws nlohmann::json::exception where a field is missing or mistyped
// (no "arch": GPT-2).
nlohmann::json gpt_config_json(const GptConfig& c);
GptConfig gpt_config_from_json(const nlohmann::json& j);
// The parameters of a model of this shape (a valid one), counted without
// building its layout, so that a claimed shape can be checked against the
// bytes that hold it before anything is allocated; INT64_MAX past that.
int64_t gpt_param_count(const GptConfig& c);

}  // namespace zerod
