// A frozen model's weights for QLoRA: each layer's products held in NF4
// (kernels/ops/nf4.h) on the device as bitsandbytes holds them, a linear
// layer at a time in transformers' orientation ([out, in]: a Llama's q, k
// and v apart, GPT-2's Conv1D weights transposed), and dequantized a layer
// at a time straight into the products' operands, with no fp32 copy of a
// matrix on the way. bitsandbytes quantizes linear layers only: a layer's
// biases and norms stay fp32 in its packed bytes, and the embeddings and
// final norm (and head) are held as operands (16 bits on a 16-bit GPU).
#pragma once

#include <array>
#include <vector>

#include "runtime/model/param_init.h"
#include "runtime/model/weights.h"

namespace zerod {

// A layer's linear layers, by the names LoRA targets them with
// (lora_config.h): module t is the transpose of the columns
// [dims.col0, dims.col0 + dims.out) of product weight `id` [in, width].
struct LinearModule {
  int id;
  LoraTargetDims dims;
};
std::vector<LinearModule> linear_modules(const GptConfig& c);
// Whether layout tensor `id` is a product weight (held in NF4).
bool is_product_weight(int id);

// What product weight `id` [in, width] of a model of shape c becomes held
// in NF4 as its linear layers: each quantized and dequantized, in place.
void nf4_round_trip_product(const GptConfig& c, int id, float* w);

// How a layer is held: its fp32 tensors (biases and norms) in layout
// order, then each linear module's NF4 parts (group absmax values, the
// offset; codes, absmax codes), the floats and the codes starting 16-byte
// aligned. A layer packs to the same bytes whatever the world size, so
// ZeRO-3 shards packed layers and gathers them as units.
class Nf4Packing {
 public:
  explicit Nf4Packing(const GptLayout& layout);
  // A packed layer's bytes: a multiple of 16.
  uint64_t layer_bytes() const { return layer_bytes_; }
  // The model's bytes held so: its layers packed, the embeddings and final
  // LayerNorm as operands of type `operands`.
  uint64_t model_bytes(DType operands) const;
  // What pack() needs of layer `layer`'s unit (its fp32 values in layout
  // order) from `init`: the whole unit, or only its fp32 tensors where
  // `held` gives the modules (held_nf4_modules: all of them).
  absl::Status read(const ParamInit& init, int layer, const Nf4ModuleReader& held, float* unit) const;
  // Packs layer `layer`'s unit into `packed`, on the host: each linear
  // module as `held` gives it (a file's NF4 bytes, kept bit for bit; it
  // must give every one), else quantized from unit in place.
  absl::Status pack(const float* unit, uint8_t* packed, int layer, const Nf4ModuleReader& held) const;
  // The layer packed at `packed` (device memory) as operand views: the
  // tensors converted and the modules dequantized into a layer's unit of
  // operands at `unpacked` (unpacked_buffer's, on the device), on cv's
  // stream.
  LayerWeights unpack(const Converter& cv, uint8_t* packed, void* unpacked) const;
  // The device buffer unpack() writes, for operands of type `operands`.
  static BufferSpec unpacked_buffer(const GptLayout& layout, DType operands);

 private:
  const GptLayout& layout_;
  std::vector<LinearModule> modules_;
  std::vector<int> small_ids_;  // a layer's fp32 tensors, in layout order
  uint64_t small_bytes_ = 0;    // theirs, rounded up to 16
  uint64_t layer_bytes_ = 0;
};

// Every rank holds every layer (ZeRO stages 0-2; stage 3 shards packed
// layers, shard/frozen_weights.h).
class Nf4Weights : public WeightSource {
 public:
  // Packs the weights `init` gives (and `held`, Nf4Packing::pack), a layer
  // at a time through host buffers of its size.
  static absl::StatusOr<Nf4Weights> create(const GptLayout* layout, const ParamInit& init,
                                           const Nf4ModuleReader& held, Device& device, Kernels& kernels);
  // What create() allocates for a table of operands `operands`, by
  // Buffers: the globals (as operands) and the packed layers; the unpacked
  // layer; the host buffers a layer passes through while it is packed
  // (the globals too, converted a packed layer's bytes at a time).
  enum Buffers { kGlobals, kLayers, kUnpacked, kLayerRead, kLayerPacked };
  static std::vector<BufferSpec> buffers(const GptLayout& layout, DType operands);

  DType dtype() const override { return convert_.kernels.operand_type(); }
  absl::StatusOr<GlobalWeights> globals() override { return globals_; }
  absl::StatusOr<LayerWeights> layer(int l) override;

 private:
  Nf4Weights(const GptLayout& layout, Converter convert) : packing_(layout), convert_(convert) {}

  Nf4Packing packing_;
  Converter convert_;
  Buffer globals_buf_, layers_, unpacked_;  // unpacked: unpacked_buffer's
  GlobalWeights globals_{};
};

}  // namespace zerod
