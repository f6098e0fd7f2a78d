#include "runtime/model/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

// Reads config.json's keys, each checked for its type; errors name the file
// and the key.
class HfKeys {
 public:
  HfKeys(std::string file, const nlohmann::json& j) : file_(std::move(file)), j_(j) {}

  absl::Status bad(const std::string& key, const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": '", key, "' ", why));
  }
  const nlohmann::json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  absl::StatusOr<int> integer(const std::string& key, std::optional<int> fallback = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback ? absl::StatusOr<int>(*fallback) : bad(key, "is missing");
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > INT32_MAX) {
      return bad(key, absl::StrCat("is ", v->dump(), ", not a positive integer"));
    }
    return v->get<int>();
  }
  absl::StatusOr<double> number(const nlohmann::json& in, const std::string& key,
                                std::optional<double> fallback) const {
    auto it = in.find(key);
    if (it == in.end() || it->is_null()) return fallback ? absl::StatusOr<double>(*fallback) : bad(key, "is missing");
    if (!it->is_number()) return bad(key, absl::StrCat("is ", it->dump(), ", not a number"));
    return it->get<double>();
  }
  absl::StatusOr<bool> flag(const std::string& key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return bad(key, absl::StrCat("is ", v->dump(), ", not true or false"));
    return v->get<bool>();
  }
  // A key that must be absent, null or one of `allowed`.
  absl::Status only(const std::string& key, std::initializer_list<nlohmann::json> allowed, const char* why) const {
    const nlohmann::json* v = find(key);
    if (!v) return absl::OkStatus();
    for (const nlohmann::json& a : allowed) {
      if (*v == a) return absl::OkStatus();
    }
    return bad(key, absl::StrCat("is ", v->dump(), ": ", why));
  }
  const nlohmann::json& json() const { return j_; }

 private:
  std::string file_;
  const nlohmann::json& j_;
};

// rope_theta and Llama 3's scaling, from the top level (transformers 4) or
// rope_parameters (5).
absl::Status read_rope(const HfKeys& k, GptConfig& c) {
  const nlohmann::json* params = k.find("rope_parameters");
  const nlohmann::json* scaling = params ? params : k.find("rope_scaling");
  const nlohmann::json& theta_in = params ? *params : k.json();
  if (params && !params->is_object()) return k.bad("rope_parameters", "is not an object");
  ZEROD_ASSIGN_OR_RETURN(c.rope_theta, k.number(theta_in, "rope_theta", 10000.0));
  if (!scaling) return absl::OkStatus();
  const char* key = params ? "rope_parameters" : "rope_scaling";
  if (!scaling->is_object()) return k.bad(key, "is not an object");
  const nlohmann::json& type =
      scaling->contains("rope_type") ? (*scaling)["rope_type"] : scaling->value("type", nlohmann::json());
  if (type == "default") return absl::OkStatus();
  if (type != "llama3") {
    return k.bad(key,
                 absl::StrCat("has rope type ", type.dump(), ": zerod turns positions as \"default\" or \"llama3\""));
  }
  RopeScaling& r = c.rope_scaling;
  ZEROD_ASSIGN_OR_RETURN(r.factor, k.number(*scaling, "factor", std::nullopt));
  ZEROD_ASSIGN_OR_RETURN(r.low_freq_factor, k.number(*scaling, "low_freq_factor", std::nullopt));
  ZEROD_ASSIGN_OR_RETURN(r.high_freq_factor, k.number(*scaling, "high_freq_factor", std::nullopt));
  ZEROD_ASSIGN_OR_RETURN(const double original, k.number(*scaling, "original_max_position_embeddings", std::nullopt));
  r.original_max_position = static_cast<int>(original);
  return absl::OkStatus();
}

absl::StatusOr<GptConfig> llama_from(const HfKeys& k, const std::string& type) {
  GptConfig c;
  c.arch = Arch::kLlama;
  ZEROD_ASSIGN_OR_RETURN(c.n_layer, k.integer("num_hidden_layers"));
  ZEROD_ASSIGN_OR_RETURN(c.n_head, k.integer("num_attention_heads"));
  ZEROD_ASSIGN_OR_RETURN(c.n_kv_head, k.integer("num_key_value_heads", c.n_head));
  ZEROD_ASSIGN_OR_RETURN(c.n_embd, k.integer("hidden_size"));
  ZEROD_ASSIGN_OR_RETURN(c.ffn_hidden, k.integer("intermediate_size"));
  ZEROD_ASSIGN_OR_RETURN(c.vocab_size, k.integer("vocab_size"));
  ZEROD_ASSIGN_OR_RETURN(c.block_size, k.integer("max_position_embeddings"));
  ZEROD_ASSIGN_OR_RETURN(c.norm_eps, k.number(k.json(), "rms_norm_eps", 1e-6));
  ZEROD_ASSIGN_OR_RETURN(c.tie_embeddings, k.flag("tie_word_embeddings", false));
  c.qkv_bias = type == "qwen2";
  ZEROD_RETURN_IF_ERROR(read_rope(k, c));
  if (c.n_embd % c.n_head == 0) {
    ZEROD_RETURN_IF_ERROR(
        k.only("head_dim", {c.n_embd / c.n_head}, "zerod's heads are hidden_size / num_attention_heads"));
  }
  ZEROD_RETURN_IF_ERROR(k.only("hidden_act", {"silu"}, "zerod's MLP is SwiGLU, of silu"));
  ZEROD_RETURN_IF_ERROR(k.only("attention_bias", {false}, "zerod's Llama has no biases on q, k, v and o_proj"));
  ZEROD_RETURN_IF_ERROR(k.only("mlp_bias", {false}, "zerod's Llama has no biases in its MLP"));
  ZEROD_RETURN_IF_ERROR(k.only("pretraining_tp", {1}, "zerod computes each product whole"));
  ZEROD_RETURN_IF_ERROR(k.only("use_sliding_window", {false}, "zerod's attention is the full causal one"));
  if (type == "mistral" && k.find("sliding_window")) {
    // Within the window attention is the full causal one.
    ZEROD_ASSIGN_OR_RETURN(const int window, k.integer("sliding_window"));
    c.block_size = std::min(c.block_size, window);
  }
  if (absl::Status s = validate_gpt_config(c); !s.ok()) {
    return k.bad("model_type", absl::StrCat("describes a shape zerod refuses: ", s.message()));
  }
  return c;
}

absl::StatusOr<GptConfig> gpt2_from(const HfKeys& k) {
  GptConfig c;
  ZEROD_ASSIGN_OR_RETURN(c.n_layer, k.integer("n_layer"));
  ZEROD_ASSIGN_OR_RETURN(c.n_head, k.integer("n_head"));
  ZEROD_ASSIGN_OR_RETURN(c.n_embd, k.integer("n_embd"));
  ZEROD_ASSIGN_OR_RETURN(c.vocab_size, k.integer("vocab_size"));
  ZEROD_ASSIGN_OR_RETURN(c.block_size, k.integer("n_positions"));
  return c;
}

}  // namespace

absl::StatusOr<GptConfig> read_hf_config(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  const std::string file = (fs::is_directory(p, ec)         ? p / "config.json"
                            : p.filename() == "config.json" ? p
                                                            : p.parent_path() / "config.json")
                               .string();
  const std::optional<std::string> text = read_whole_file(file);
  if (!text) return absl::InvalidArgumentError(absl::StrCat("no Hugging Face config.json at ", file));
  ZEROD_ASSIGN_OR_RETURN(const nlohmann::json j, parse_strict_json(*text, file));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  const HfKeys k(file, j);
  const nlohmann::json type = j.value("model_type", nlohmann::json());
  if (type == "llama" || type == "mistral" || type == "qwen2") return llama_from(k, type.get<std::string>());
  if (type == "gpt2") return gpt2_from(k);
  return k.bad("model_type", absl::StrCat("is ", type.dump(), ": zerod trains llama, mistral, qwen2 and gpt2"));
}

const char* torch_dtype(DType t) {
  switch (t) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

nlohmann::json hf_llama_config_json(const GptConfig& c, DType dtype) {
  const bool qwen = c.qkv_bias;
  const RopeScaling& r = c.rope_scaling;
  nlohmann::json j = {{"architectures", {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                      {"model_type", qwen ? "qwen2" : "llama"},
                      {"hidden_size", c.n_embd},
                      {"intermediate_size", c.ffn_hidden},
                      {"num_hidden_layers", c.n_layer},
                      {"num_attention_heads", c.n_head},
                      {"num_key_value_heads", c.kv_heads()},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.block_size},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"rope_scaling", nullptr},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"hidden_act", "silu"},
                      {"torch_dtype", torch_dtype(dtype)}};
  if (r.factor != 0) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position}};
  }
  if (qwen) {
    j["use_sliding_window"] = false;
  } else {
    j["head_dim"] = c.head_dim();
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  return j;
}

}  // namespace zerod
