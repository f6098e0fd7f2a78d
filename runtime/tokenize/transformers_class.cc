#include "runtime/tokenize/transformers_class.h"

#include <algorithm>
#include <string_view>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {
namespace {

// transformers 5.24's TOKENIZER_MAPPING_NAMES and
// MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS, as far as they decide a
// byte-fallback BPE (scripts/transformers_tokenizer_classes.py prints them).
// clang-format off
constexpr std::string_view kFileSteps[] = {
    "EvollaModel", "arctic", "aria", "beam", "bigbird_pegasus", "camembertv2-base", "canary", "chatlm",
    "cohere_asr", "ernie4_5", "ernie4_5_moe", "flex_olmo", "fuyu", "glm", "glm4", "glm4_moe", "glm4_moe_lite",
    "glm4v", "glm4v_moe", "glm_image", "glmasr", "got_ocr2", "gpt_bigcode", "gradium_phonon_tts", "granite",
    "granitemoe", "granitemoehybrid", "granitemoeshared", "h2ovl_chat", "hyperclovax", "hyperclovax_vlm",
    "internlm2", "internlm3", "iquestcoder", "jamba", "kimi_k25", "kimi_linear", "kosmos-2", "llava", "llava_next",
    "mimo_v2_flash", "minicpm3", "minicpm_ocr", "minicpmv", "minicpmv4_6", "minicpmv4_7", "minimax_m2", "ministral",
    "ministral3", "mistral", "mistral3", "mistral_large4", "mixtral", "modernbert", "modernbert-decoder", "molmo",
    "molmo2", "nemo_speechlm", "nemotron", "nvfp4", "nystromformer", "olmo2", "olmo3", "olmo_hybrid", "omniasr",
    "opencua", "openvla", "paddleocr_vl", "pegasus_x", "persimmon", "phi3", "phi3_v", "phimoe", "pix2struct",
    "pixtral", "pocket_tts", "smolvlm", "stablelm", "step3_vl", "umt5", "vipllava", "voxtral", "voxtral_realtime",
    "xlm-roberta-xl"
};
constexpr std::string_view kLlamaTypes[] = {
    "idefics", "idefics2"
};
constexpr std::string_view kGemmaTypes[] = {
    "diffusion_gemma", "gemma", "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "recurrent_gemma",
    "shieldgemma2", "t5gemma", "zaya"
};
constexpr std::string_view kHubClassIgnored[] = {
    "arctic", "camembertv2-base", "chatlm", "cohere_asr", "ernie4_5", "ernie4_5_moe", "fuyu", "h2ovl_chat",
    "hyperclovax", "hyperclovax_vision_v2", "hyperclovax_vlm", "internlm2", "internlm3", "iquestcoder", "jamba",
    "llava", "llava_next", "minicpm3", "minicpmv", "minimax_m2", "modernbert", "modernbert-decoder", "molmo",
    "molmo2", "nemotron", "nvfp4", "opencua", "openvla", "paddleocr_vl", "phi3", "phi3_v", "phimoe", "qwen2",
    "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "qwen4_exp", "siglip2", "smolvlm", "step3_vl", "vipllava"
};
// clang-format on

bool listed(std::string_view name, const auto& table) {
  return std::binary_search(std::begin(table), std::end(table), name);
}

// The hub's class without its "Fast"; empty for the backends, which read
// the file as it is.
std::string hub_class(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Fast") == 0) name.resize(name.size() - 4);
  if (name == "PreTrainedTokenizer" || name == "TokenizersBackend" || name == "PythonBackend") return "";
  return name;
}

}  // namespace

std::string transformers_class(const TokenizerConfig& config) {
  const std::string hub = hub_class(config.tokenizer_class);
  const std::string_view type = config.model_type;
  const char* registered = listed(type, kFileSteps)         ? ""
                           : listed(type, kLlamaTypes)      ? "LlamaTokenizer"
                           : listed(type, kGemmaTypes)      ? "GemmaTokenizer"
                           : listed(type, kHubClassIgnored) ? "?"
                                                            : nullptr;
  if (config.tokenizer_class.empty()) return registered != nullptr ? registered : "";
  if (registered == nullptr || hub == registered) return hub;
  if (*registered == '\0') return "";  // a backend: the file's steps
  return listed(type, kHubClassIgnored) ? registered : hub;
}

}  // namespace zerod
