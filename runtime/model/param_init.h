// Where a run's initial parameters come from: a Hugging Face GPT-2 file
// (model.init_from), for an adapter layout a PEFT adapter directory
// (model.lora.init_from), or the seed.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "runtime/core/status.h"
#include "runtime/model/gpt_layout.h"

namespace zerod {

// Writes the initial fp32 values of flat parameters [begin, end) to out.
using ParamInit = std::function<absl::Status(int64_t begin, int64_t end, float* out)>;

// A file is opened and checked whole here, before anything is allocated;
// it is read as the ranges are asked for. `layout` outlives the result.
absl::StatusOr<ParamInit> initial_params(const GptLayout& layout, uint64_t seed,
                                         const std::optional<std::string>& init_from);

}  // namespace zerod
