// Hugging Face weights of the Llama family (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM), both ways: a model directory with
// its config.json (hf_config.h) and model.safetensors, or shards that
// model.safetensors.index.json names. transformers keeps nn.Linear's
// [out, in] and q, k, v (gate, up) apart; zerod's products are [in, out]
// with them side by side (gpt_layout.h), so a product's tensor is the
// transpose of its Hugging Face tensors stacked. Bounded memory whatever
// the model: a tensor at a time, in fp32.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/bnb_nf4.h"
#include "runtime/model/gpt_layout.h"
#include "runtime/model/hf_gpt2.h"

namespace zerod {

// Writes `dir`'s config.json and its weights in `dtype` (fp32, bf16 or
// fp16): model.safetensors, or, past `shard_bytes`, shards of at most that
// (one tensor may pass it alone) and their index. Each file appears whole
// or not at all.
absl::Status export_llama(const std::string& dir, const GptLayout& layout, DType dtype, const ParamRangeReader& read,
                          int64_t shard_bytes = int64_t{5} << 30);

// A Llama-family model's weights to initialise `layout` from, checked whole
// when opened: `path` is the model directory, its index or its one weights
// file; its config.json must describe the layout's model (block_size up to
// its positions); every tensor present in F32, BF16 or F16 of its shape, in
// the file the index names, and no tensor the model does not have (a tied
// head's lm_head.weight, where a file keeps one, equal to embed_tokens).
// A linear layer may be held in NF4 as bitsandbytes saves it (bnb_nf4.h; a
// 4-bit model's files): its values are then its dequantized weights, and
// its bytes can be had as they are. Errors name the file and the tensor or
// key.
class LlamaWeights {
 public:
  static absl::StatusOr<LlamaWeights> open(const std::string& path, const GptLayout& layout);
  LlamaWeights(LlamaWeights&& o) noexcept;
  // The flat parameters [begin, end) as fp32. A product's tensor is made
  // whole (transposed) the first time a range reaches it, and kept for the
  // ranges after it.
  absl::Status read(int64_t begin, int64_t end, float* out) const;
  // Whether some linear layer is held in NF4.
  bool holds_nf4() const { return !nf4_.empty(); }
  int64_t nf4_count() const { return static_cast<int64_t>(nf4_.size()); }
  // Linear module `module` (nf4_weights.h's order) of layer `layer` as the
  // file holds it in NF4, into `into`; false where it is not held so.
  absl::StatusOr<bool> read_nf4(int layer, int module, const Nf4Tensor& into) const;

  // A Hugging Face tensor: its file, and its place in zerod's segment.
  struct Part {
    int file;
    const SafeTensor* t;
  };

 private:
  LlamaWeights(const GptLayout& layout) : layout_(&layout) {}
  absl::Status fill(size_t segment) const;

  const GptLayout* layout_;
  std::vector<SafetensorsReader> files_;
  std::vector<std::vector<Part>> parts_;  // by segment of layout.segments()
  std::vector<bool> transposed_;          // by segment: a product's, made whole by fill()
  std::map<std::string, BnbNf4Weight> nf4_;  // linear layers held in NF4, by weight name
  mutable std::mutex mu_;                 // the transposed segment below
  mutable int64_t held_ = -1;
  mutable std::vector<float> segment_;
};

}  // namespace zerod
