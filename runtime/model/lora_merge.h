// A LoRA run's model with its adapters folded in, as export --merge writes
// it: each adapted product's weight W + scale·A·B (W as the run held it:
// through NF4 where the base was quantized), every other tensor the base's.
#pragma once

#include <optional>
#include <vector>

#include "runtime/model/gpt_layout.h"
#include "runtime/model/hf_gpt2.h"
#include "runtime/model/param_init.h"

namespace zerod {

class MergedWeights {
 public:
  // `base` gives the model layout's values, `adapters` the adapter
  // layout's; both layouts outlive this. `nf4_base`: the run held the base
  // in NF4 from these values, so its products are rounded through NF4 here
  // too (not where the values are a 4-bit file's already).
  MergedWeights(const GptLayout& model, const GptLayout& adapters, ParamInit base, ParamRangeReader adapters_read,
                bool nf4_base);
  // The merged model's parameters [begin, end) of the model layout.
  absl::Status read(int64_t begin, int64_t end, float* out);

 private:
  // A product's weight, whole, as merged: through NF4 with an NF4 base, plus
  // scale·A·B of each adapted target in its columns. Kept for the next read.
  absl::StatusOr<const std::vector<float>*> merged(const ParamSegment& s);

  const GptLayout& model_;
  const GptLayout& adapters_;
  ParamInit base_;
  ParamRangeReader adapters_read_;
  bool nf4_base_;
  std::optional<std::pair<int, int>> cached_;  // (id, layer) of cache_
  std::vector<float> cache_;
};

}  // namespace zerod
