#include "runtime/model/gpt_config.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace zerod {

absl::StatusOr<GptConfig> gpt_preset(const std::string& name) {
  // n_layer, n_head, n_embd, vocab_size, block_size
  if (name == "gpt2-tiny") return GptConfig{2, 2, 64, 256, 64};
  if (name == "gpt2") return GptConfig{12, 12, 768, 50257, 1024};
  if (name == "gpt2-medium") return GptConfig{24, 16, 1024, 50257, 1024};
  if (name == "gpt2-large") return GptConfig{36, 20, 1280, 50257, 1024};
  if (name == "gpt2-xl") return GptConfig{48, 25, 1600, 50257, 1024};
  return absl::InvalidArgumentError(absl::StrCat(
      "model.preset '", name,
      "' does not exist (expected gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl or custom)"));
}

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
  return absl::OkStatus();
}

int64_t gpt_param_count(const GptConfig& c) {
  // wte, wpe, and per layer two LayerNorms (4C), c_attn (3C² + 3C),
  // attn.c_proj (C² + C), c_fc (4C² + 4C), mlp.c_proj (4C² + C); ln_f (2C).
  const __int128 C = c.n_embd;
  const __int128 n =
      __int128(c.vocab_size) * C + __int128(c.block_size) * C + c.n_layer * (12 * C * C + 13 * C) + 2 * C;
  return n > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(n);
}

}  // namespace zerod
