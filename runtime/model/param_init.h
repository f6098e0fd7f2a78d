// Where a run's initial parameters come from: a Hugging Face model's files
// (model.init_from), for an adapter layout a PEFT adapter directory
// (model.lora.init_from), or the seed.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "runtime/core/status.h"
#include "runtime/kernels/ops/nf4.h"
#include "runtime/model/gpt_layout.h"

namespace zerod {

// Writes the initial fp32 values of flat parameters [begin, end) to out.
using ParamInit = std::function<absl::Status(int64_t begin, int64_t end, float* out)>;

// A file is opened and checked whole here, before anything is allocated;
// it is read as the ranges are asked for. `layout` outlives the result.
absl::StatusOr<ParamInit> initial_params(const GptLayout& layout, uint64_t seed,
                                         const std::optional<std::string>& init_from);

// Linear module `module` (nf4_weights.h's order) of layer `layer` as a
// file holds it in NF4, into `into`: false where the file does not.
using Nf4ModuleReader = std::function<absl::StatusOr<bool>(int layer, int module, const Nf4Tensor& into)>;
// Where init_from holds a Llama's linear layers in NF4 (a bitsandbytes
// 4-bit model, bnb_nf4.h), their bytes as they are, for a base held in
// NF4; null where it holds none (or there is no file). A file holding some
// of them in NF4 and others not is refused.
absl::StatusOr<Nf4ModuleReader> held_nf4_modules(const GptLayout& layout, const std::optional<std::string>& init_from);

// Seconds this process has spent in the two above's results so far (draws
// from the seed, or file reads), summed over the threads that called
// them: the initial weights' part of a start.
double initial_weights_seconds();

}  // namespace zerod
