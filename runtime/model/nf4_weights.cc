#include "runtime/model/nf4_weights.h"

#include <algorithm>

namespace zerod {
namespace {

uint64_t aligned(uint64_t bytes) { return (bytes + 15) / 16 * 16; }

// A matrix's NF4 parts back to back, floats first: group absmax values,
// the offset, codes, absmax codes.
uint64_t matrix_bytes(int64_t n) { return aligned(nf4_sizes(n).bytes()); }

Nf4Tensor carve(uint8_t* at, int64_t n) {
  const Nf4Sizes z = nf4_sizes(n);
  auto* group_absmax = reinterpret_cast<float*>(at);
  return {at + 4 * z.groups + 4, at + 4 * z.groups + 4 + z.code_bytes, group_absmax, group_absmax + z.groups, n};
}

// A layer's fp32 unit, and its operands after it where those are not fp32.
int64_t unpacked_bytes(const GptLayout& layout, DType operands) {
  const int64_t n = layout.unit_numel(GptLayout::layer_unit(0));
  return n * 4 + (needs_staging(DType::kF32, operands) ? n * dtype_size(operands) : 0);
}

bool is_matrix(int id) { return std::ranges::count(Nf4Packing::kMatrices, id) > 0; }

// The host buffer the weights are read into: a layer's unit, or the
// embeddings and final LayerNorm together.
int64_t read_numel(const GptLayout& layout) {
  return std::max(layout.unit_numel(GptLayout::layer_unit(0)),
                  layout.unit_numel(0) + layout.unit_numel(layout.final_unit()));
}

}  // namespace

Nf4Packing::Nf4Packing(const GptLayout& layout) : layout_(layout) {
  int64_t small = 0;
  for (const ParamSegment& s : layout.segments()) {
    if (s.layer == 0 && layout.tensor(s.id).per_layer && !is_matrix(s.id)) {
      small_ids_.push_back(s.id);
      small += s.numel;
    }
  }
  small_bytes_ = aligned(small * 4);
  layer_bytes_ = small_bytes_;
  for (int id : kMatrices) layer_bytes_ += matrix_bytes(layout.tensor(id).numel);
}

uint64_t Nf4Packing::model_bytes() const {
  return layout_.config().n_layer * layer_bytes_ +
         4 * static_cast<uint64_t>(layout_.unit_numel(0) + layout_.unit_numel(layout_.final_unit()));
}

void Nf4Packing::pack(const float* unit, uint8_t* packed) const {
  std::fill_n(packed, layer_bytes_, 0);  // the alignment's padding too: a packed layer is the same bytes every time
  float* small = reinterpret_cast<float*>(packed);
  for (int id : small_ids_) {
    const ParamTensorInfo& t = layout_.tensor(id);
    small = std::copy_n(unit + t.unit_offset, t.numel, small);
  }
  uint8_t* at = packed + small_bytes_;
  for (int id : kMatrices) {
    const ParamTensorInfo& t = layout_.tensor(id);
    nf4_quantize(unit + t.unit_offset, carve(at, t.numel));
    at += matrix_bytes(t.numel);
  }
}

LayerWeights Nf4Packing::unpack(Device& device, const Converter& cv, uint8_t* packed, void* unpacked) const {
  float* unit = static_cast<float*>(unpacked);
  const float* small = reinterpret_cast<const float*>(packed);
  for (int id : small_ids_) {
    const ParamTensorInfo& t = layout_.tensor(id);
    device.copy(cv.stream, unit + t.unit_offset, small, t.numel * 4);
    small += t.numel;
  }
  uint8_t* at = packed + small_bytes_;
  for (int id : kMatrices) {
    const ParamTensorInfo& t = layout_.tensor(id);
    cv.kernels.nf4_dequantize(cv.stream, carve(at, t.numel), unit + t.unit_offset);
    at += matrix_bytes(t.numel);
  }
  return layer_weight_views(cv, layout_, DType::kF32, unit, unit + layout_.unit_numel(GptLayout::layer_unit(0)));
}

BufferSpec Nf4Packing::unpacked_buffer(const GptLayout& layout, DType operands) {
  return {"a layer's weights, unpacked", Category::kWorkspace, static_cast<uint64_t>(unpacked_bytes(layout, operands))};
}

std::vector<BufferSpec> Nf4Weights::buffers(const GptLayout& layout, DType operands) {
  const uint64_t packed = Nf4Packing(layout).layer_bytes();
  const uint64_t globals = layout.unit_numel(0) + layout.unit_numel(layout.final_unit());
  return {{"frozen weights: embeddings and final LayerNorm", Category::kFrozen, globals * 4},
          {"frozen weights: layers, matrices in NF4", Category::kFrozen, layout.config().n_layer * packed},
          Nf4Packing::unpacked_buffer(layout, operands),
          {"frozen weights: embeddings and final LayerNorm as operands", Category::kWorkspace,
           weight_staging(layout).globals * dtype_size(operands), needs_staging(DType::kF32, operands) ? 1 : 0},
          {"frozen weights, a layer as read", Category::kWorkspace, static_cast<uint64_t>(read_numel(layout) * 4), 1,
           Tier::kHost, /*kept=*/false},
          {"frozen weights, a layer packed", Category::kWorkspace, packed, 1, Tier::kHost, /*kept=*/false}};
}

absl::StatusOr<Nf4Weights> Nf4Weights::create(const GptLayout* layout, const ParamInit& init, Device& device,
                                              Kernels& kernels) {
  Stream& s = device.compute_stream();
  const GptLayout& L = *layout;
  Nf4Weights w(L, Converter{kernels, s});
  w.device_ = &device;
  const uint64_t packed_bytes = w.packing_.layer_bytes();
  const int64_t emb = L.unit_numel(0), fin = L.unit_numel(L.final_unit());
  const std::vector<BufferSpec> specs = buffers(L, kernels.operand_type());
  ZEROD_ASSIGN_OR_RETURN(w.globals_buf_, allocate_spec(device, specs[kGlobals]));
  ZEROD_ASSIGN_OR_RETURN(w.layers_, allocate_spec(device, specs[kLayers]));
  ZEROD_ASSIGN_OR_RETURN(w.unpacked_, allocate_spec(device, specs[kUnpacked]));
  if (specs[kGlobalOperands].count > 0) {
    ZEROD_ASSIGN_OR_RETURN(w.global_staging_, allocate_spec(device, specs[kGlobalOperands]));
  }
  ZEROD_ASSIGN_OR_RETURN(Buffer read, allocate_spec(device, specs[kLayerRead]));
  ZEROD_ASSIGN_OR_RETURN(Buffer packed, allocate_spec(device, specs[kLayerPacked]));
  float* host = read.host<float>();

  ZEROD_RETURN_IF_ERROR(init(L.unit_begin(0), L.unit_begin(0) + emb, host));
  ZEROD_RETURN_IF_ERROR(init(L.unit_begin(L.final_unit()), L.unit_begin(L.final_unit()) + fin, host + emb));
  device.copy(s, w.globals_buf_.data(), host, (emb + fin) * 4);
  ZEROD_RETURN_IF_ERROR(device.synchronize(s));
  w.globals_ = global_weight_views(w.convert_, L, DType::kF32, w.globals_buf_.data(), w.globals_buf_.ptr<float>() + emb,
                                   w.global_staging_.data());

  for (int l = 0; l < L.config().n_layer; ++l) {
    const int u = GptLayout::layer_unit(l);
    ZEROD_RETURN_IF_ERROR(init(L.unit_begin(u), L.unit_begin(u) + L.unit_numel(u), host));
    w.packing_.pack(host, packed.host<uint8_t>());
    device.copy(s, w.layers_.ptr<uint8_t>() + l * packed_bytes, packed.data(), packed_bytes);
    ZEROD_RETURN_IF_ERROR(device.synchronize(s));  // before the next layer reuses the host buffers
  }
  return w;
}

absl::StatusOr<LayerWeights> Nf4Weights::layer(int l) {
  return packing_.unpack(*device_, convert_, layers_.ptr<uint8_t>() + l * packing_.layer_bytes(), unpacked_.data());
}

}  // namespace zerod
