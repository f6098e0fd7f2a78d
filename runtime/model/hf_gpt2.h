// Hugging Face GPT-2 weights: a model.safetensors with GPT2Model's tensor
// names (wte.weight, wpe.weight, h.{i}.ln_1.weight, h.{i}.attn.c_attn.weight,
// ..., ln_f.bias; Conv1D weights [in, out], which is the flat layout's own
// orientation; the LM head tied to wte) and its config.json. The vocabulary
// is the model's own size: nothing is padded, so nothing is trimmed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/gpt_layout.h"

namespace zerod {

// The Hugging Face name of a tensor of the layout.
std::string hf_tensor_name(const GptLayout& layout, const ParamSegment& s);

// Fills out with the fp32 flat parameters [begin, end).
using ParamRangeReader = std::function<absl::Status(int64_t begin, int64_t end, float* out)>;

// The checks an export starts with: weights in fp32, bf16 or fp16, and
// `dir` made where it does not exist yet.
absl::Status begin_export(const std::string& dir, DType dtype);

// Writes <dir>/model.safetensors, its tensors in `dtype` (fp32, bf16 or
// fp16), and <dir>/config.json; dir is created if needed. Tensor by tensor,
// in parts of a few million elements: host memory stays bounded whatever
// the model. Each file appears whole or not at all.
absl::Status export_gpt2(const std::string& dir, const GptLayout& layout, DType dtype, const ParamRangeReader& read);

// A model.safetensors to initialise `layout` from, checked whole when
// opened: every tensor present (bare names or under "transformer."), of the
// layout's shape, in F32, BF16 or F16, and no tensor the model does not
// have (the attention-mask buffers and a tied lm_head.weight are allowed).
// A config.json beside the file, when there is one, must describe the same
// model. Errors name the file and the tensor or field.
class Gpt2Weights {
 public:
  static absl::StatusOr<Gpt2Weights> open(const std::string& path, const GptLayout& layout);
  // The flat parameters [begin, end) as fp32: only the bytes that hold them are read.
  absl::Status read(int64_t begin, int64_t end, float* out) const;

 private:
  Gpt2Weights(SafetensorsReader r, const GptLayout& layout) : reader_(std::move(r)), layout_(&layout) {}

  SafetensorsReader reader_;
  const GptLayout* layout_;
  std::vector<const SafeTensor*> by_segment_;  // the file's tensor of each of layout.segments()
};

}  // namespace zerod
