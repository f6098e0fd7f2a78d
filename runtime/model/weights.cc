#include "runtime/model/weights.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

constexpr int kLayerIds[] = {kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB,
                             kLn2W, kLn2B, kFcW,  kFcB,  kFcProjW,  kFcProjB};

// `id`'s tensor inside its unit, as an operand: in place, or converted
// into staging at the same offset. Of two float types that differ, one is
// fp32: the weights' where a GPU table takes 16-bit operands (NF4's
// dequantized ones), the operands' on the CPU.
const void* weight_view(const Converter& cv, const GptLayout& layout, DType dtype, const void* unit, void* staging,
                        int id) {
  const ParamTensorInfo& t = layout.tensor(id);
  if (t.numel == 0) return nullptr;
  const DType op = cv.kernels.operand_type();
  const void* src = static_cast<const char*>(unit) + t.unit_offset * dtype_size(dtype);
  if (!needs_staging(dtype, op)) return src;
  void* dst = static_cast<char*>(staging) + t.unit_offset * dtype_size(op);
  if (op == DType::kF32) {
    cv.kernels.convert_to_f32(cv.stream, dtype, src, static_cast<float*>(dst), t.numel);
  } else {
    cv.kernels.convert_from_f32(cv.stream, op, static_cast<const float*>(src), dst, t.numel);
  }
  return dst;
}

}  // namespace

GlobalWeights global_weight_views(const Converter& cv, const GptLayout& layout, DType dtype, const void* emb,
                                  const void* fin, void* staging) {
  void* fin_staging =
      staging ? static_cast<char*>(staging) + layout.unit_numel(0) * dtype_size(cv.kernels.operand_type()) : nullptr;
  return {weight_view(cv, layout, dtype, emb, staging, kWte), weight_view(cv, layout, dtype, emb, staging, kWpe),
          weight_view(cv, layout, dtype, fin, fin_staging, kLnfW),
          weight_view(cv, layout, dtype, fin, fin_staging, kLnfB),
          weight_view(cv, layout, dtype, fin, fin_staging, kLmHead)};
}

LayerWeights layer_weight_views(const Converter& cv, const GptLayout& layout, DType dtype, const void* unit,
                                void* staging) {
  const void* p[12];
  for (int i = 0; i < 12; ++i) p[i] = weight_view(cv, layout, dtype, unit, staging, kLayerIds[i]);
  LayerWeights w{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
  if (const LoraConfig* lora = layout.lora()) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!lora->targets[t]) continue;
      w.lora[t] = {weight_view(cv, layout, dtype, unit, staging, lora_a_id(t)),
                   weight_view(cv, layout, dtype, unit, staging, lora_a_id(t) + 1), lora->r, lora->scale()};
    }
  }
  return w;
}

GlobalGrads global_grad_views(const GptLayout& layout, float* emb, float* fin) {
  const auto at = [&](float* unit, int id) {
    return layout.tensor(id).numel ? unit + layout.tensor(id).unit_offset : nullptr;
  };
  return {at(emb, kWte), at(emb, kWpe), at(fin, kLnfW), at(fin, kLnfB), at(fin, kLmHead)};
}

LayerGrads layer_grad_views(const GptLayout& layout, float* unit) {
  const auto at = [&](int id) { return layout.tensor(id).numel ? unit + layout.tensor(id).unit_offset : nullptr; };
  float* p[12];
  for (int i = 0; i < 12; ++i) p[i] = at(kLayerIds[i]);
  LayerGrads g{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
  for (int t = 0; t < kNumLoraTargets; ++t) g.lora[t] = {at(lora_a_id(t)), at(lora_a_id(t) + 1)};
  return g;
}

std::vector<int64_t> contiguous_unit_offsets(const GptLayout& layout) {
  std::vector<int64_t> offsets(layout.num_units());
  for (int u = 0; u < layout.num_units(); ++u) offsets[u] = layout.unit_begin(u);
  return offsets;
}

absl::Status check_weight_types(DType dtype, DType operands) {
  if (dtype == operands || dtype == DType::kF32 || operands == DType::kF32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("weights of ", dtype_name(dtype), " cannot reach a kernel table of ",
                                                 dtype_name(operands), " operands"));
}

WeightStaging weight_staging(const GptLayout& layout) {
  return {layout.unit_numel(0) + layout.unit_numel(layout.final_unit()), layout.unit_numel(1)};
}

std::vector<BufferSpec> weight_staging_buffers(const GptLayout& layout, DType dtype, DType operands) {
  const int copies = needs_staging(dtype, operands) ? 1 : 0;
  const WeightStaging n = weight_staging(layout);
  const uint64_t op = dtype_size(operands);
  return {
      {absl::StrCat(dtype_name(operands), " copy of the global weights"), Category::kWorkspace, n.globals * op, copies},
      {absl::StrCat(dtype_name(operands), " copy of a layer's weights"), Category::kWorkspace, n.layer * op, copies}};
}

absl::StatusOr<FlatWeights> FlatWeights::create(const GptLayout* layout, DType dtype, const void* params,
                                                Device& device, Kernels& kernels, std::vector<int64_t> unit_offsets) {
  ZEROD_RETURN_IF_ERROR(check_weight_types(dtype, kernels.operand_type()));
  FlatWeights w(Converter{kernels, device.compute_stream()});
  w.layout_ = layout;
  w.dtype_ = dtype;
  w.params_ = params;
  w.unit_offsets_ = unit_offsets.empty() ? contiguous_unit_offsets(*layout) : std::move(unit_offsets);
  const std::vector<BufferSpec> staging = weight_staging_buffers(*layout, dtype, kernels.operand_type());
  if (staging[kGlobalStaging].count > 0) {
    ZEROD_ASSIGN_OR_RETURN(w.global_staging_, allocate_spec(device, staging[kGlobalStaging]));
    ZEROD_ASSIGN_OR_RETURN(w.layer_staging_, allocate_spec(device, staging[kLayerStaging]));
  }
  return w;
}

const void* FlatWeights::unit(int u) const {
  return static_cast<const char*>(params_) + unit_offsets_[u] * dtype_size(dtype_);
}

absl::StatusOr<GlobalWeights> FlatWeights::globals() {
  // Converted tensors are converted once per parameter update.
  if (!needs_staging(dtype_, convert_.kernels.operand_type()) || !globals_ready_) {
    globals_ =
        global_weight_views(convert_, *layout_, dtype_, unit(0), unit(layout_->final_unit()), global_staging_.data());
    globals_ready_ = true;
  }
  return globals_;
}

absl::StatusOr<LayerWeights> FlatWeights::layer(int l) {
  return layer_weight_views(convert_, *layout_, dtype_, unit(GptLayout::layer_unit(l)), layer_staging_.data());
}

absl::StatusOr<LayerWeights> AdaptedWeights::layer(int l) {
  ZEROD_ASSIGN_OR_RETURN(LayerWeights w, model_.layer(l));
  ZEROD_ASSIGN_OR_RETURN(const LayerWeights a, adapters_.layer(l));
  std::copy(std::begin(a.lora), std::end(a.lora), std::begin(w.lora));
  return w;
}

absl::Status AdaptedWeights::prefetch(int next, int then) {
  ZEROD_RETURN_IF_ERROR(model_.prefetch(next, then));
  return adapters_.prefetch(next, then);
}

absl::Status AdaptedWeights::end_pass() {
  absl::Status s = model_.end_pass();
  s.Update(adapters_.end_pass());
  return s;
}

FlatGrads::FlatGrads(const GptLayout* layout, float* grads, std::vector<int64_t> unit_offsets)
    : layout_(layout),
      grads_(grads),
      unit_offsets_(unit_offsets.empty() ? contiguous_unit_offsets(*layout) : std::move(unit_offsets)) {}

absl::StatusOr<GlobalGrads> FlatGrads::globals() {
  return global_grad_views(*layout_, grads_ + unit_offsets_[0], grads_ + unit_offsets_[layout_->final_unit()]);
}

absl::StatusOr<LayerGrads> FlatGrads::layer(int l) {
  return layer_grad_views(*layout_, grads_ + unit_offsets_[GptLayout::layer_unit(l)]);
}

}  // namespace zerod
