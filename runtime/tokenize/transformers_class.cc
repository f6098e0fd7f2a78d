#include "runtime/tokenize/transformers_class.h"

#include <algorithm>
#include <string_view>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {
namespace {

// transformers 5.24's TOKENIZER_MAPPING_NAMES (the model types registered to
// a backend, to the classes zerod follows, to another) and
// MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
// (scripts/transformers_tokenizer_classes.py prints them).
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
constexpr std::string_view kOtherClass[] = {
    "aimv2", "albert", "align", "audioflamingo3", "aya_vision", "bark", "bart", "barthez", "bartpho", "bert",
    "bert-generation", "bert-japanese", "bertweet", "big_bird", "biogpt", "blenderbot", "blenderbot-small", "blip",
    "blip-2", "bridgetower", "bros", "byt5", "camembert", "canine", "chinese_clip", "clap", "clip", "clipseg",
    "clvp", "code_llama", "codegen", "cohere", "cohere2", "colqwen2", "convbert", "cosmos3_omni", "cpm", "cpmant",
    "ctrl", "data2vec-audio", "data2vec-text", "dbrx", "deberta", "deberta-v2", "dia", "distilbert", "dots3_note",
    "dpr", "electra", "emu3", "ernie", "esm", "esmc", "esmfold2", "falcon_mamba", "flaubert", "flava", "florence2",
    "fnet", "fsmt", "fun_asr_nano", "funnel", "git", "gpt-sw3", "gpt2", "gpt_neo", "gpt_neox", "gpt_neox_japanese",
    "gptj", "granite_speech5_ctc", "grounding-dino", "groupvit", "gte", "herbert", "hubert", "hunyuan_vl",
    "hyperclovax_vision_v2", "ibert", "instructblip", "instructblipvideo", "internvl", "jais2",
    "jina_embeddings_v3", "lasr_ctc", "lasr_encoder", "layoutlm", "layoutlmv2", "layoutlmv3", "layoutxlm", "led",
    "lighton_ocr", "lilt", "longformer", "luke", "lxmert", "m2m_100", "mamba", "mamba2", "marian", "markuplm",
    "mbart", "mbart50", "mega", "megatron-bert", "metaclip_2", "mgp-str", "mluke", "mm-grounding-dino",
    "mobilebert", "moss_transcribe_diarize", "mpnet", "mpt", "mra", "mt5", "musicgen", "musicgen_melody", "mvp",
    "myt5", "nemotron3_5_asr", "nemotron_asr_streaming", "nezha", "nllb", "nllb-moe", "nomic_bert", "nougat",
    "olmo", "olmoe", "omdet-turbo", "omniasr_ctc", "oneformer", "openai-gpt", "opt", "ovis2", "owlv2", "owlvit",
    "parakeet_ctc", "parakeet_rnnt", "parakeet_tdt", "pegasus", "perceiver", "phi", "phobert", "plbart",
    "pp_formulanet", "prophetnet", "qdqbert", "qianfan_ocr", "qwen2", "qwen2_5_omni", "qwen2_5_vl", "qwen2_audio",
    "qwen2_moe", "qwen2_vl", "qwen3", "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5_text", "qwen3_asr",
    "qwen3_moe", "qwen3_next", "qwen3_omni_moe", "qwen3_vl", "qwen3_vl_moe", "qwen4_exp", "rag", "realm",
    "reformer", "rembert", "retribert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "rwkv", "sam3",
    "sam3_video", "seamless_m4t", "seamless_m4t_v2", "siglip", "siglip2", "speech_to_text", "speecht5", "splinter",
    "squeezebert", "starcoder2", "switch_transformers", "t5", "tapas", "tipsv2", "trocr", "tvp", "udop",
    "unispeech", "unispeech-sat", "vibevoice", "videoprism", "vilt", "visual_bert", "vits", "wav2vec2",
    "wav2vec2-bert", "wav2vec2-conformer", "wav2vec2_phoneme", "whisper", "xclip", "xglm", "xlm", "xlm-roberta",
    "xlnet", "xlstm", "xmod", "yoso"
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
  const char* registered = listed(type, kFileSteps)    ? ""
                           : listed(type, kLlamaTypes) ? "LlamaTokenizer"
                           : listed(type, kGemmaTypes) ? "GemmaTokenizer"
                           : listed(type, kOtherClass) ? "?"
                                                       : nullptr;
  if (config.tokenizer_class.empty()) return registered != nullptr ? registered : "";
  if (registered == nullptr || hub == registered) return hub;
  if (*registered == '\0') return "";  // a backend: the file's steps
  return listed(type, kHubClassIgnored) ? registered : hub;
}

}  // namespace zerod
