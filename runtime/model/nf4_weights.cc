#include "runtime/model/nf4_weights.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

uint64_t aligned(uint64_t bytes) { return (bytes + 15) / 16 * 16; }

// A module's NF4 parts: its floats (group absmax values, the offset, the
// map), then its codes and absmax codes.
uint64_t float_bytes(int64_t n) { return aligned(4 * (nf4_sizes(n).groups + 1 + kNf4MapValues)); }
uint64_t matrix_bytes(int64_t n) { return float_bytes(n) + aligned(nf4_sizes(n).code_bytes + nf4_sizes(n).blocks); }

Nf4Tensor carve(uint8_t* at, int64_t n) {
  const Nf4Sizes z = nf4_sizes(n);
  auto* group_absmax = reinterpret_cast<float*>(at);
  uint8_t* codes = at + float_bytes(n);
  return {codes, codes + z.code_bytes, group_absmax, group_absmax + z.groups, group_absmax + z.groups + 1, n};
}

int64_t module_numel(const LinearModule& m) { return int64_t(m.dims.out) * m.dims.in; }

}  // namespace

std::vector<LinearModule> linear_modules(const GptConfig& c) {
  std::vector<LinearModule> modules;
  for (int t = 0; t < lora_targets_of(c.arch); ++t) {
    modules.push_back({lora_target_product(c.arch, t), lora_target_dims(c, t)});
  }
  return modules;
}

bool is_product_weight(int id) { return std::ranges::count(kLoraProductWeights, id) > 0; }

void nf4_round_trip_product(const GptConfig& c, int id, float* w) {
  for (const LinearModule& m : linear_modules(c)) {
    if (m.id != id) continue;
    const LoraTargetDims& d = m.dims;
    const Nf4HostTensor h(module_numel(m));
    nf4_quantize_transposed(w + d.col0, d.in, d.width, h.t);
    nf4_dequantize_transposed(h.t, d.out, d.in, d.width, w + d.col0);
  }
}

Nf4Packing::Nf4Packing(const GptLayout& layout) : layout_(layout), modules_(linear_modules(layout.config())) {
  int64_t small = 0;
  for (const ParamSegment& s : layout.segments()) {
    if (s.layer == 0 && layout.tensor(s.id).per_layer && !is_product_weight(s.id)) {
      small_ids_.push_back(s.id);
      small += s.numel;
    }
  }
  small_bytes_ = aligned(small * 4);
  layer_bytes_ = small_bytes_;
  for (const LinearModule& m : modules_) layer_bytes_ += matrix_bytes(module_numel(m));
}

uint64_t Nf4Packing::model_bytes(DType operands) const {
  return layout_.config().n_layer * layer_bytes_ +
         dtype_size(operands) * static_cast<uint64_t>(layout_.unit_numel(0) + layout_.unit_numel(layout_.final_unit()));
}

absl::Status Nf4Packing::read(const ParamInit& init, int layer, const Nf4ModuleReader& held, float* unit) const {
  const int64_t begin = layout_.unit_begin(GptLayout::layer_unit(layer));
  if (!held) return init(begin, begin + layout_.unit_numel(GptLayout::layer_unit(layer)), unit);
  for (int id : small_ids_) {
    const ParamTensorInfo& t = layout_.tensor(id);
    ZEROD_RETURN_IF_ERROR(init(begin + t.unit_offset, begin + t.unit_offset + t.numel, unit + t.unit_offset));
  }
  return absl::OkStatus();
}

absl::Status Nf4Packing::pack(const float* unit, uint8_t* packed, int layer, const Nf4ModuleReader& held) const {
  std::fill_n(packed, layer_bytes_, 0);  // the alignment's padding too: a packed layer is the same bytes every time
  float* small = reinterpret_cast<float*>(packed);
  for (int id : small_ids_) {
    const ParamTensorInfo& t = layout_.tensor(id);
    small = std::copy_n(unit + t.unit_offset, t.numel, small);
  }
  uint8_t* at = packed + small_bytes_;
  for (size_t k = 0; k < modules_.size(); ++k) {
    const LinearModule& m = modules_[k];
    const LoraTargetDims& d = m.dims;
    const Nf4Tensor t = carve(at, module_numel(m));
    at += matrix_bytes(module_numel(m));
    if (!held) {
      nf4_quantize_transposed(unit + layout_.tensor(m.id).unit_offset + d.col0, d.in, d.width, t);
      continue;
    }
    // read() left the products unread: every module must come from `held`.
    ZEROD_ASSIGN_OR_RETURN(const bool read, held(layer, static_cast<int>(k), t));
    if (!read) return absl::InternalError(absl::StrCat("layer ", layer, "'s linear module ", k, " is not held in NF4"));
  }
  return absl::OkStatus();
}

LayerWeights Nf4Packing::unpack(const Converter& cv, uint8_t* packed, void* unpacked) const {
  const DType operands = cv.kernels.operand_type();
  const auto operand = [&](int64_t offset) { return static_cast<char*>(unpacked) + offset * dtype_size(operands); };
  const float* small = reinterpret_cast<const float*>(packed);
  for (int id : small_ids_) {
    const ParamTensorInfo& t = layout_.tensor(id);
    cv.kernels.convert_from_f32(cv.stream, operands, small, operand(t.unit_offset), t.numel);
    small += t.numel;
  }
  uint8_t* at = packed + small_bytes_;
  for (const LinearModule& m : modules_) {
    const LoraTargetDims& d = m.dims;
    cv.kernels.nf4_dequantize(cv.stream, carve(at, module_numel(m)), {d.out, d.in, d.width},
                              operand(layout_.tensor(m.id).unit_offset + d.col0));
    at += matrix_bytes(module_numel(m));
  }
  return layer_weight_views(cv, layout_, operands, unpacked, nullptr);
}

BufferSpec Nf4Packing::unpacked_buffer(const GptLayout& layout, DType operands) {
  const int64_t n = layout.unit_numel(GptLayout::layer_unit(0));
  return {"a layer's weights, unpacked", Category::kWorkspace, static_cast<uint64_t>(n * dtype_size(operands))};
}

std::vector<BufferSpec> Nf4Weights::buffers(const GptLayout& layout, DType operands) {
  const uint64_t packed = Nf4Packing(layout).layer_bytes();
  const uint64_t globals = layout.unit_numel(0) + layout.unit_numel(layout.final_unit());
  return {{"frozen weights: embeddings and final LayerNorm", Category::kFrozen, globals * dtype_size(operands)},
          {"frozen weights: layers, matrices in NF4", Category::kFrozen, layout.config().n_layer * packed},
          Nf4Packing::unpacked_buffer(layout, operands),
          {"frozen weights, a layer as read", Category::kWorkspace, static_cast<uint64_t>(layout.unit_numel(GptLayout::layer_unit(0)) * 4), 1,
           Tier::kHost, /*kept=*/false},
          {"frozen weights, a layer packed", Category::kWorkspace, packed, 1, Tier::kHost, /*kept=*/false}};
}

absl::StatusOr<Nf4Weights> Nf4Weights::create(const GptLayout* layout, const ParamInit& init,
                                              const Nf4ModuleReader& held, Device& device, Kernels& kernels) {
  Stream& s = device.compute_stream();
  const GptLayout& L = *layout;
  Nf4Weights w(L, Converter{kernels, s});
  const uint64_t packed_bytes = w.packing_.layer_bytes();
  const int64_t emb = L.unit_numel(0);
  const DType operands = kernels.operand_type();
  const size_t op_bytes = dtype_size(operands);
  const std::vector<BufferSpec> specs = buffers(L, operands);
  ZEROD_ASSIGN_OR_RETURN(w.globals_buf_, allocate_spec(device, specs[kGlobals]));
  ZEROD_ASSIGN_OR_RETURN(w.layers_, allocate_spec(device, specs[kLayers]));
  ZEROD_ASSIGN_OR_RETURN(w.unpacked_, allocate_spec(device, specs[kUnpacked]));
  ZEROD_ASSIGN_OR_RETURN(Buffer read, allocate_spec(device, specs[kLayerRead]));
  ZEROD_ASSIGN_OR_RETURN(Buffer packed, allocate_spec(device, specs[kLayerPacked]));
  float* host = read.host<float>();

  // The globals become operands on the host, as the device's conversion
  // rounds them (to nearest even), read and converted through the layer's
  // host buffers a chunk at a time.
  char* globals = w.globals_buf_.ptr<char>();
  const int64_t chunk = std::min(L.unit_numel(GptLayout::layer_unit(0)), static_cast<int64_t>(packed_bytes / op_bytes));
  for (const auto& [u, to] : {std::pair{0, int64_t{0}}, std::pair{L.final_unit(), emb}}) {
    for (int64_t at = 0; at < L.unit_numel(u); at += chunk) {
      const int64_t n = std::min(chunk, L.unit_numel(u) - at);
      ZEROD_RETURN_IF_ERROR(init(L.unit_begin(u) + at, L.unit_begin(u) + at + n, host));
      convert_from_f32(operands, host, packed.data(), n);
      device.copy(s, globals + (to + at) * op_bytes, packed.data(), n * op_bytes);
      ZEROD_RETURN_IF_ERROR(device.synchronize(s));  // before the next chunk reuses the host buffers
    }
  }
  w.globals_ = global_weight_views(w.convert_, L, operands, globals, globals + emb * op_bytes, nullptr);

  for (int l = 0; l < L.config().n_layer; ++l) {
    ZEROD_RETURN_IF_ERROR(w.packing_.read(init, l, held, host));
    ZEROD_RETURN_IF_ERROR(w.packing_.pack(host, packed.host<uint8_t>(), l, held));
    device.copy(s, w.layers_.ptr<uint8_t>() + l * packed_bytes, packed.data(), packed_bytes);
    ZEROD_RETURN_IF_ERROR(device.synchronize(s));  // before the next layer reuses the host buffers
  }
  return w;
}

absl::StatusOr<LayerWeights> Nf4Weights::layer(int l) {
  return packing_.unpack(convert_, layers_.ptr<uint8_t>() + l * packing_.layer_bytes(), unpacked_.data());
}

}  // namespace zerod
