#include "runtime/model/param_init.h"

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"

#include "runtime/model/hf_gpt2.h"
#include "runtime/model/hf_llama.h"
#include "runtime/model/peft_adapter.h"

namespace zerod {
namespace {

std::atomic<uint64_t> initial_weights_ns{0};

// f, its time counted in initial_weights_ns.
template <class F>
auto timed(F f) {
  return [f = std::move(f)](auto... args) {
    const auto t = std::chrono::steady_clock::now();
    auto result = f(args...);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t);
    initial_weights_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
    return result;
  };
}

absl::StatusOr<ParamInit> untimed_initial_params(const GptLayout& layout, uint64_t seed,
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

}  // namespace

absl::StatusOr<ParamInit> initial_params(const GptLayout& layout, uint64_t seed,
                                         const std::optional<std::string>& init_from) {
  ZEROD_ASSIGN_OR_RETURN(ParamInit init, untimed_initial_params(layout, seed, init_from));
  return ParamInit(timed(std::move(init)));
}

double initial_weights_seconds() { return static_cast<double>(initial_weights_ns.load(std::memory_order_relaxed)) * 1e-9; }

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
  return Nf4ModuleReader(
      timed([file](int layer, int module, const Nf4Tensor& into) { return file->read_nf4(layer, module, into); }));
}

}  // namespace zerod
