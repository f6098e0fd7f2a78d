// Hugging Face config.json files as zerod's model shapes, both ways:
// GPT2LMHeadModel's (model_type gpt2) and the Llama family's (llama,
// mistral, qwen2). transformers 4 keeps rope_theta and rope_scaling at the
// top level, 5 in rope_parameters: both are read, the first written.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/model/gpt_config.h"

namespace zerod {

// The config.json at `path`: the file itself, the directory holding it, or
// a weights file beside it. Another model_type, or a setting zerod's model
// computes otherwise (another activation, rope type, biases on o_proj or
// the MLP, sliding windows), is refused naming the file and the key.
// Mistral's sliding window bounds block_size: within it attention is the
// full causal one.
absl::StatusOr<GptConfig> read_hf_config(const std::string& path);

// config.json's name of weights of type t: "float32", "bfloat16", "float16".
const char* torch_dtype(DType t);

// A Llama-family model's config.json: LlamaForCausalLM's, or
// Qwen2ForCausalLM's where it has q/k/v biases, weights of `dtype`.
nlohmann::json hf_llama_config_json(const GptConfig& c, DType dtype);

}  // namespace zerod
