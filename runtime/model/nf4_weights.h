// A frozen model's weights for QLoRA: each layer's four matrices (c_attn,
// attn.c_proj, c_fc, mlp.c_proj) held in NF4 (kernels/cpu/nf4.h) on the
// device and dequantized a layer at a time into fp32 staging for the
// products; biases, LayerNorms and the embeddings stay fp32, as
// bitsandbytes quantizes linear layers only.
#pragma once

#include <array>
#include <vector>

#include "runtime/model/param_init.h"
#include "runtime/model/weights.h"

namespace zerod {

class Nf4Weights : public WeightSource {
 public:
  // Quantizes the weights `init` gives, one matrix at a time through host
  // buffers of its size.
  static absl::StatusOr<Nf4Weights> create(const GptLayout* layout, const ParamInit& init, Device& device,
                                           Kernels& kernels);
  // What create() allocates, on plan's device.
  static void plan(const GptLayout& layout, MemoryPlan& plan);
  // The ids of the matrices held in NF4.
  static constexpr std::array<int, 4> kMatrices = kLoraProductWeights;

  DType dtype() const override { return DType::kF32; }
  absl::StatusOr<GlobalWeights> globals() override { return globals_; }
  absl::StatusOr<LayerWeights> layer(int l) override;

 private:
  // Elements of a layer's fp32 tensors (all but the matrices), and the
  // bytes of its matrices in NF4.
  struct Sizes {
    int64_t small;
    uint64_t nf4;
  };
  static Sizes sizes(const GptLayout& layout);
  explicit Nf4Weights(Converter convert) : convert_(convert) {}

  Converter convert_;
  Device* device_ = nullptr;
  const GptLayout* layout_ = nullptr;
  std::vector<int> small_ids_;  // a layer's fp32 tensors, in layout order
  int64_t small_numel_ = 0;     // their elements
  Buffer globals_buf_, small_, nf4_, staging_;  // staging: one layer's unit, fp32
  GlobalWeights globals_{};
  std::vector<std::array<Nf4Tensor, 4>> matrices_;  // per layer, device addresses
};

}  // namespace zerod
