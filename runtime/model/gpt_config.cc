#include "runtime/model/gpt_config.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

// A Llama-family shape: n_layer, n_head, n_kv_head, n_embd, ffn_hidden,
// vocab_size, max_position_embeddings, rope_theta, rms_norm_eps, tied,
// q/k/v biases, as the models' published config.json files give them.
GptConfig llama_shape(int L, int NH, int KV, int C, int F, int V, int positions, double theta, double eps, bool tied,
                      bool qkv_bias, RopeScaling scaling = {}) {
  GptConfig c{L, NH, C, V, positions};
  c.arch = Arch::kLlama;
  c.n_kv_head = KV;
  c.ffn_hidden = F;
  c.rope_theta = theta;
  c.rope_scaling = scaling;
  c.norm_eps = eps;
  c.tie_embeddings = tied;
  c.qkv_bias = qkv_bias;
  return c;
}

// Llama 3.1 and 3.2's rope_scaling.
RopeScaling llama3_scaling(double factor) { return {factor, 1, 4, 8192}; }

}  // namespace

const char* arch_name(Arch a) { return a == Arch::kLlama ? "llama" : "gpt2"; }

absl::StatusOr<GptConfig> gpt_preset(const std::string& name) {
  // n_layer, n_head, n_embd, vocab_size, block_size
  if (name == "gpt2-tiny") return GptConfig{2, 2, 64, 256, 64};
  if (name == "gpt2") return GptConfig{12, 12, 768, 50257, 1024};
  if (name == "gpt2-medium") return GptConfig{24, 16, 1024, 50257, 1024};
  if (name == "gpt2-large") return GptConfig{36, 20, 1280, 50257, 1024};
  if (name == "gpt2-xl") return GptConfig{48, 25, 1600, 50257, 1024};
  // Grouped-query attention, an untied head: the Llama features in a model
  // that trains in seconds.
  if (name == "llama-tiny") return llama_shape(2, 4, 2, 64, 128, 256, 64, 10000, 1e-5, false, false);
  if (name == "llama-3.2-1b") {
    return llama_shape(16, 32, 8, 2048, 8192, 128256, 131072, 500000, 1e-5, true, false, llama3_scaling(32));
  }
  if (name == "llama-3.2-3b") {
    return llama_shape(28, 24, 8, 3072, 8192, 128256, 131072, 500000, 1e-5, true, false, llama3_scaling(32));
  }
  if (name == "llama-3.1-8b") {
    return llama_shape(32, 32, 8, 4096, 14336, 128256, 131072, 500000, 1e-5, false, false, llama3_scaling(8));
  }
  if (name == "llama-3.1-70b") {
    return llama_shape(80, 64, 8, 8192, 28672, 128256, 131072, 500000, 1e-5, false, false, llama3_scaling(8));
  }
  // Mistral-7B-v0.3 (no sliding window).
  if (name == "mistral-7b") return llama_shape(32, 32, 8, 4096, 14336, 32768, 32768, 1e6, 1e-5, false, false);
  if (name == "qwen2.5-0.5b") return llama_shape(24, 14, 2, 896, 4864, 151936, 32768, 1e6, 1e-6, true, true);
  if (name == "qwen2.5-1.5b") return llama_shape(28, 12, 2, 1536, 8960, 151936, 32768, 1e6, 1e-6, true, true);
  if (name == "qwen2.5-7b") return llama_shape(28, 28, 4, 3584, 18944, 152064, 131072, 1e6, 1e-6, false, true);
  if (name == "qwen2.5-72b") return llama_shape(80, 64, 8, 8192, 29568, 152064, 131072, 1e6, 1e-5, false, true);
  return absl::InvalidArgumentError(
      absl::StrCat("model.preset '", name,
                   "' does not exist (expected gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-tiny, "
                   "llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-3.1-70b, mistral-7b, qwen2.5-0.5b, qwen2.5-1.5b, "
                   "qwen2.5-7b, qwen2.5-72b or custom)"));
}

namespace {

absl::Status validate_llama_fields(const GptConfig& c) {
  if (c.n_kv_head < 0 || c.n_head % c.kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.n_head (", c.n_head,
                                                   ") must be a multiple of model.n_kv_head (", c.n_kv_head, ")"));
  }
  if (c.head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rotary positions need an even head size; n_embd / n_head is ", c.head_dim()));
  }
  if (c.ffn_hidden <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.ffn_hidden must be positive, got ", c.ffn_hidden));
  }
  if (!(c.rope_theta > 1) || !std::isfinite(c.rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("model.rope_theta must be finite and above 1, got ", c.rope_theta));
  }
  if (!(c.norm_eps > 0) || !(c.norm_eps < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("model.norm_eps must be in (0, 1), got ", c.norm_eps));
  }
  const RopeScaling& r = c.rope_scaling;
  if (r.factor != 0 && (!(r.factor >= 1) || !std::isfinite(r.factor) || !(r.low_freq_factor > 0) ||
                        !(r.high_freq_factor > r.low_freq_factor) || !std::isfinite(r.high_freq_factor) ||
                        r.original_max_position <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.rope_scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and a positive "
        "original_max_position_embeddings; got factor ",
        r.factor, ", low_freq_factor ", r.low_freq_factor, ", high_freq_factor ", r.high_freq_factor,
        ", original_max_position_embeddings ", r.original_max_position));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_gpt_config(const GptConfig& c) {
  const std::pair<const char*, int> fields[] = {{"n_layer", c.n_layer},
                                                {"n_head", c.n_head},
                                                {"n_embd", c.n_embd},
                                                {"vocab_size", c.vocab_size},
                                                {"block_size", c.block_size}};
  for (const auto& [name, v] : fields) {
    if (v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("model.", name, " must be positive, got ", v));
    }
  }
  if (c.n_embd % c.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model.n_embd (", c.n_embd,
                                                   ") must be divisible by model.n_head (", c.n_head, ")"));
  }
  if (c.llama()) return validate_llama_fields(c);
  const GptConfig plain{};
  if (c.n_kv_head != 0 || c.ffn_hidden != 0 || c.rope_theta != plain.rope_theta || c.rope_scaling.factor != 0 ||
      c.norm_eps != plain.norm_eps || !c.tie_embeddings || c.qkv_bias) {
    return absl::InvalidArgumentError(
        "model.n_kv_head, ffn_hidden, rope_theta, rope_scaling, norm_eps, tie_embeddings and qkv_bias are the "
        "Llama family's: set model.arch to \"llama\"");
  }
  return absl::OkStatus();
}

nlohmann::json gpt_config_json(const GptConfig& c) {
  nlohmann::json j = {{"n_layer", c.n_layer},
                      {"n_head", c.n_head},
                      {"n_embd", c.n_embd},
                      {"vocab_size", c.vocab_size},
                      {"block_size", c.block_size}};
  if (!c.llama()) return j;
  const RopeScaling& r = c.rope_scaling;
  j["arch"] = arch_name(c.arch);
  j["n_kv_head"] = c.kv_heads();
  j["ffn_hidden"] = c.ffn_hidden;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = r.factor == 0 ? nlohmann::json(nullptr)
                                    : nlohmann::json{{"factor", r.factor},
                                                     {"low_freq_factor", r.low_freq_factor},
                                                     {"high_freq_factor", r.high_freq_factor},
                                                     {"original_max_position_embeddings", r.original_max_position}};
  j["norm_eps"] = c.norm_eps;
  j["tie_embeddings"] = c.tie_embeddings;
  j["qkv_bias"] = c.qkv_bias;
  return j;
}

GptConfig gpt_config_from_json(const nlohmann::json& j) {
  GptConfig c{j.at("n_layer").get<int>(), j.at("n_head").get<int>(), j.at("n_embd").get<int>(),
              j.at("vocab_size").get<int>(), j.at("block_size").get<int>()};
  if (!j.contains("arch")) return c;
  const std::string arch = j.at("arch").get<std::string>();
  if (arch != "llama") throw nlohmann::json::other_error::create(501, "arch '" + arch + "' is not known", &j);
  c.arch = Arch::kLlama;
  c.n_kv_head = j.at("n_kv_head").get<int>();
  c.ffn_hidden = j.at("ffn_hidden").get<int>();
  c.rope_theta = j.at("rope_theta").get<double>();
  if (const nlohmann::json& r = j.at("rope_scaling"); !r.is_null()) {
    c.rope_scaling = {r.at("factor").get<double>(), r.at("low_freq_factor").get<double>(),
                      r.at("high_freq_factor").get<double>(), r.at("original_max_position_embeddings").get<int>()};
  }
  c.norm_eps = j.at("norm_eps").get<double>();
  c.tie_embeddings = j.at("tie_embeddings").get<bool>();
  c.qkv_bias = j.at("qkv_bias").get<bool>();
  return c;
}

int64_t gpt_param_count(const GptConfig& c) {
  const __int128 C = c.n_embd, V = c.vocab_size;
  __int128 n;
  if (c.llama()) {
    // embed_tokens, lm_head when untied; per layer two RMSNorms (2C),
    // q/k/v (C x qkv, and its bias), o_proj (C²), gate and up (2CF), down
    // (FC); the final norm (C).
    const __int128 qkv = c.qkv_width(), F = c.ffn_hidden;
    n = V * C * (c.tie_embeddings ? 1 : 2) +
        c.n_layer * (2 * C + C * qkv + (c.qkv_bias ? qkv : 0) + C * C + 3 * C * F) + C;
  } else {
    // wte, wpe, and per layer two LayerNorms (4C), c_attn (3C² + 3C),
    // attn.c_proj (C² + C), c_fc (4C² + 4C), mlp.c_proj (4C² + C); ln_f (2C).
    n = V * C + __int128(c.block_size) * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
  }
  return n > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(n);
}

}  // namespace zerod
