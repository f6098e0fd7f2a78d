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
// The parameters of a GPT-2 of this shape (a valid one), counted without
// building its layout, so that a claimed shape can be checked against the
// bytes that hold it before anything is allocated; INT64_MAX past that.
int64_t gpt_param_count(const GptConfig& c);

}  // namespace zerod
