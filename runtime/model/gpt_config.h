// GPT-2 shapes: the named presets and custom sizes.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/status.h"

namespace zerod {

struct GptConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int vocab_size = 0;
  int block_size = 0;
};

// "gpt2-tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl".
absl::StatusOr<GptConfig> gpt_preset(const std::string& name);
// Positive sizes, n_embd divisible by n_head.
absl::Status validate_gpt_config(const GptConfig& c);

}  // namespace zerod
