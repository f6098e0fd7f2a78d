// LoRA adapters in PEFT's files, as PeftModel.save_pretrained writes them
// and PeftModel.from_pretrained reads them: a directory with
// adapter_config.json and adapter_model.safetensors, whose tensors are
// named base_model.model.transformer.h.{i}.{module}.lora_{A,B}.weight
// (GPT-2) or base_model.model.model.layers.{i}.{module}.lora_{A,B}.weight
// (a Llama) in torch Linear's orientation, A [r, in] and B [out, r]: the
// transposes of the adapter layout's A [in, r] and B [r, out] (GPT-2's
// Conv1D keeps [in, out], hence its fan_in_fan_out).
#pragma once

#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/gpt_layout.h"
#include "runtime/model/hf_gpt2.h"

namespace zerod {

// The file's name for a tensor of an adapter layout.
std::string peft_tensor_name(const GptLayout& adapters, const ParamSegment& s);

// Writes <dir>/adapter_model.safetensors (tensors in `dtype`: fp32, bf16 or
// fp16) and <dir>/adapter_config.json; `base_model` is the config's
// base_model_name_or_path. Each file appears whole or not at all.
absl::Status export_peft_adapter(const std::string& dir, const GptLayout& adapters, DType dtype,
                                 const std::string& base_model, const ParamRangeReader& read);

// A PEFT adapter directory to start an adapter layout from, checked whole
// when opened: the config's peft_type, r, lora_alpha, use_rslora and bias
// those of the layout's settings; every tensor of the layout present with
// its shape, in F32, BF16 or F16, and none for a module the layout does not
// adapt. Errors name the file and the key or tensor.
class PeftAdapter {
 public:
  static absl::StatusOr<PeftAdapter> open(const std::string& dir, const GptLayout& adapters);
  // The adapter layout's parameters [begin, end) as fp32.
  absl::Status read(int64_t begin, int64_t end, float* out) const;

 private:
  PeftAdapter(const GptLayout& adapters, std::vector<std::vector<float>> tensors)
      : layout_(&adapters), tensors_(std::move(tensors)) {}

  const GptLayout* layout_;
  std::vector<std::vector<float>> tensors_;  // by segment, in the layout's orientation
};

}  // namespace zerod
