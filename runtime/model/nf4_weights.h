// A frozen model's weights for QLoRA: each layer's four matrices (c_attn,
// attn.c_proj, c_fc, mlp.c_proj) held in NF4 (kernels/ops/nf4.h) on the
// device and dequantized a layer at a time into fp32 staging for the
// products (then converted to the table's operands where those are 16-bit);
// biases, LayerNorms and the embeddings stay fp32, as bitsandbytes
// quantizes linear layers only.
#pragma once

#include <array>
#include <vector>

#include "runtime/model/param_init.h"
#include "runtime/model/weights.h"

namespace zerod {

// How a layer is held: its fp32 tensors (biases and LayerNorms) in layout
// order, then each matrix's NF4 parts (group absmax values, the offset,
// codes, absmax codes), every part starting 16-byte aligned. A layer packs
// to the same bytes whatever the world size, so ZeRO-3 shards packed layers
// and gathers them as units.
class Nf4Packing {
 public:
  // The ids of the matrices held in NF4.
  static constexpr std::array<int, 4> kMatrices = kLoraProductWeights;

  explicit Nf4Packing(const GptLayout& layout);
  // A packed layer's bytes: a multiple of 16.
  uint64_t layer_bytes() const { return layer_bytes_; }
  // The model's bytes held so: its layers packed, the embeddings and final
  // LayerNorm in fp32.
  uint64_t model_bytes() const;
  // Packs a layer's unit (its fp32 values in layout order) into `packed`,
  // on the host.
  void pack(const float* unit, uint8_t* packed) const;
  // The layer packed at `packed` (device memory) as operand views: the
  // tensors copied and the matrices dequantized into a layer's fp32 unit at
  // the start of `unpacked` (unpacked_buffer's, on the device), on cv's
  // stream; converted after it for 16-bit operands.
  LayerWeights unpack(Device& device, const Converter& cv, uint8_t* packed, void* unpacked) const;
  // The device buffer unpack() writes, for operands of type `operands`.
  static BufferSpec unpacked_buffer(const GptLayout& layout, DType operands);

 private:
  const GptLayout& layout_;
  std::vector<int> small_ids_;  // a layer's fp32 tensors, in layout order
  uint64_t small_bytes_ = 0;    // theirs, rounded up to 16
  uint64_t layer_bytes_ = 0;
};

// Every rank holds every layer (ZeRO stages 0-2; stage 3 shards packed
// layers, shard/frozen_weights.h).
class Nf4Weights : public WeightSource {
 public:
  // Quantizes the weights `init` gives, a layer at a time through host
  // buffers of its size.
  static absl::StatusOr<Nf4Weights> create(const GptLayout* layout, const ParamInit& init, Device& device,
                                           Kernels& kernels);
  // What create() allocates for a table of operands `operands`, by
  // Buffers: the globals and the packed layers; the unpacked layer; the
  // globals as operands (16-bit ones); the host buffers a layer passes
  // through while it is packed.
  enum Buffers { kGlobals, kLayers, kUnpacked, kGlobalOperands, kLayerRead, kLayerPacked };
  static std::vector<BufferSpec> buffers(const GptLayout& layout, DType operands);

  DType dtype() const override { return DType::kF32; }
  absl::StatusOr<GlobalWeights> globals() override { return globals_; }
  absl::StatusOr<LayerWeights> layer(int l) override;

 private:
  Nf4Weights(const GptLayout& layout, Converter convert) : packing_(layout), convert_(convert) {}

  Nf4Packing packing_;
  Converter convert_;
  Device* device_ = nullptr;
  Buffer globals_buf_, layers_, unpacked_;  // unpacked: unpacked_buffer's
  Buffer global_staging_;                   // the globals as 16-bit operands
  GlobalWeights globals_{};
};

}  // namespace zerod
