#include "runtime/model/weights.h"

namespace zerod {
namespace {

constexpr int kGlobalIds[] = {kWte, kWpe, kLnfW, kLnfB};
constexpr int kLayerIds[] = {kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB,
                             kLn2W, kLn2B, kFcW,  kFcB,  kFcProjW,  kFcProjB};

}  // namespace

absl::StatusOr<FlatWeights> FlatWeights::create(const GptLayout* layout, DType dtype, const void* params) {
  FlatWeights w;
  w.layout_ = layout;
  w.dtype_ = dtype;
  w.params_ = params;
  if (dtype != DType::kF32) {
    int64_t global_n = 0, layer_n = 0;
    for (int id : kGlobalIds) global_n += layout->tensor(id).layer_numel;
    for (int id : kLayerIds) layer_n += layout->tensor(id).layer_numel;
    ZEROD_ASSIGN_OR_RETURN(w.global_staging_, Buffer::allocate(global_n * 4, Category::kWorkspace));
    ZEROD_ASSIGN_OR_RETURN(w.layer_staging_, Buffer::allocate(layer_n * 4, Category::kWorkspace));
  }
  return w;
}

const float* FlatWeights::view(int id, int layer, float* staging) {
  const int64_t off = layout_->offset(id, layer);
  if (dtype_ == DType::kF32) return static_cast<const float*>(params_) + off;
  const auto* src = static_cast<const uint16_t*>(params_) + off;
  convert_to_f32(dtype_, src, staging, layout_->tensor(id).layer_numel);
  return staging;
}

GlobalWeights FlatWeights::globals() {
  float* s = global_staging_.as<float>();
  const float* p[4];
  for (int i = 0; i < 4; ++i) {
    const int id = kGlobalIds[i];
    // 16-bit tensors are converted once per parameter update.
    p[i] = (dtype_ == DType::kF32 || !globals_ready_) ? view(id, 0, s) : s;
    if (s) s += layout_->tensor(id).layer_numel;
  }
  globals_ready_ = true;
  return {p[0], p[1], p[2], p[3]};
}

LayerWeights FlatWeights::layer(int l) {
  float* s = layer_staging_.as<float>();
  const float* p[12];
  for (int i = 0; i < 12; ++i) {
    p[i] = view(kLayerIds[i], l, s);
    if (s) s += layout_->tensor(kLayerIds[i]).layer_numel;
  }
  return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}

LayerGrads layer_grads(const GptLayout& layout, float* grads, int l) {
  float* p[12];
  for (int i = 0; i < 12; ++i) p[i] = grads + layout.offset(kLayerIds[i], l);
  return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}

}  // namespace zerod
