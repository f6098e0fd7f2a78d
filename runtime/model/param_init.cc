#include "runtime/model/param_init.h"

#include <memory>

#include "runtime/model/hf_gpt2.h"
#include "runtime/model/hf_llama.h"
#include "runtime/model/peft_adapter.h"

namespace zerod {

absl::StatusOr<ParamInit> initial_params(const GptLayout& layout, uint64_t seed,
                                         const std::optional<std::string>& init_from) {
  if (!init_from) {
    return [&layout, seed, cursors = std::make_shared<InitCursors>()](int64_t begin, int64_t end, float* out) {
      init_gpt_range(layout, seed, begin, end, out, cursors.get());
      return absl::OkStatus();
    };
  }
  if (layout.lora()) {
    ZEROD_ASSIGN_OR_RETURN(PeftAdapter a, PeftAdapter::open(*init_from, layout));
    auto file = std::make_shared<const PeftAdapter>(std::move(a));
    return [file](int64_t begin, int64_t end, float* out) { return file->read(begin, end, out); };
  }
  if (layout.config().llama()) {
    ZEROD_ASSIGN_OR_RETURN(LlamaWeights w, LlamaWeights::open(*init_from, layout));
    auto file = std::make_shared<const LlamaWeights>(std::move(w));
    return [file](int64_t begin, int64_t end, float* out) { return file->read(begin, end, out); };
  }
  ZEROD_ASSIGN_OR_RETURN(Gpt2Weights w, Gpt2Weights::open(*init_from, layout));
  auto file = std::make_shared<const Gpt2Weights>(std::move(w));
  return [file](int64_t begin, int64_t end, float* out) { return file->read(begin, end, out); };
}

}  // namespace zerod
