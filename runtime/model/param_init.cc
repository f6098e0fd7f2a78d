#include "runtime/model/param_init.h"

#include <memory>

#include "absl/strings/str_cat.h"

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

absl::StatusOr<Nf4ModuleReader> held_nf4_modules(const GptLayout& layout, const std::optional<std::string>& init_from) {
  if (!init_from || layout.lora() || !layout.config().llama()) return Nf4ModuleReader();
  ZEROD_ASSIGN_OR_RETURN(LlamaWeights w, LlamaWeights::open(*init_from, layout));
  if (!w.holds_nf4()) return Nf4ModuleReader();
  const int64_t modules = int64_t(layout.config().n_layer) * lora_targets_of(Arch::kLlama);
  if (w.nf4_count() != modules) {
    return absl::InvalidArgumentError(absl::StrCat(*init_from, " holds ", w.nf4_count(), " of the model's ", modules,
                                                   " linear layers in NF4: a base held in NF4 takes all or none"));
  }
  auto file = std::make_shared<const LlamaWeights>(std::move(w));
  return [file](int layer, int module, const Nf4Tensor& into) { return file->read_nf4(layer, module, into); };
}

}  // namespace zerod
