#include "runtime/model/nf4_weights.h"

#include <algorithm>

namespace zerod {
namespace {

// A matrix's NF4 parts back to back, floats first: group absmax values,
// the offset, codes, absmax codes; each matrix starts 16-byte aligned.
uint64_t matrix_bytes(int64_t n) { return (nf4_sizes(n).bytes() + 15) / 16 * 16; }

Nf4Tensor carve(uint8_t* at, int64_t n) {
  const Nf4Sizes z = nf4_sizes(n);
  auto* group_absmax = reinterpret_cast<float*>(at);
  return {at + 4 * z.groups + 4, at + 4 * z.groups + 4 + z.code_bytes, group_absmax, group_absmax + z.groups, n};
}

// The host buffer the weights are read into: a layer's unit, or the
// embeddings and final LayerNorm together.
int64_t read_numel(const GptLayout& layout) {
  return std::max(layout.unit_numel(GptLayout::layer_unit(0)), layout.unit_numel(0) + layout.unit_numel(layout.final_unit()));
}

bool is_matrix(int id) { return std::ranges::count(Nf4Weights::kMatrices, id) > 0; }

// The layer tensors that stay fp32, in layout order.
std::vector<int> small_ids(const GptLayout& layout) {
  std::vector<int> ids;
  for (const ParamSegment& s : layout.segments()) {
    if (s.layer == 0 && layout.tensor(s.id).per_layer && !is_matrix(s.id)) ids.push_back(s.id);
  }
  return ids;
}

}  // namespace

Nf4Weights::Sizes Nf4Weights::sizes(const GptLayout& layout) {
  Sizes z{0, 0};
  for (int id : small_ids(layout)) z.small += layout.tensor(id).numel;
  for (int id : kMatrices) z.nf4 += matrix_bytes(layout.tensor(id).numel);
  return z;
}

void Nf4Weights::plan(const GptLayout& layout, MemoryPlan& plan) {
  const Sizes z = sizes(layout);
  const int L = layout.config().n_layer;
  const int64_t unit = layout.unit_numel(GptLayout::layer_unit(0));
  plan.add_device("frozen weights: embeddings and final LayerNorm", Category::kFrozen,
                  (layout.unit_numel(0) + layout.unit_numel(layout.final_unit())) * 4);
  plan.add_device("frozen weights: biases and LayerNorms", Category::kFrozen, L * z.small * 4);
  plan.add_device("frozen weights: matrices in NF4", Category::kFrozen, L * z.nf4);
  plan.add_device("fp32 copy of a layer's weights", Category::kWorkspace, unit * 4);
  plan.add("frozen weights, a layer as read", Tier::kHost, Category::kWorkspace, read_numel(layout) * 4, Phase::kBuild,
           false);
  plan.add("frozen weights, a layer quantized", Tier::kHost, Category::kWorkspace, z.small * 4 + z.nf4, Phase::kBuild,
           false);
}

absl::StatusOr<Nf4Weights> Nf4Weights::create(const GptLayout* layout, const ParamInit& init, Device& device,
                                              Kernels& kernels) {
  Stream& s = device.compute_stream();
  Nf4Weights w(Converter{kernels, s});
  w.device_ = &device;
  w.layout_ = layout;
  const GptLayout& L = *layout;
  const Sizes z = sizes(L);
  w.small_ids_ = small_ids(L);
  w.small_numel_ = z.small;
  const int layers = L.config().n_layer;
  const int64_t emb = L.unit_numel(0), fin = L.unit_numel(L.final_unit());
  const int64_t unit = L.unit_numel(GptLayout::layer_unit(0));
  ZEROD_ASSIGN_OR_RETURN(w.globals_buf_, device.allocate((emb + fin) * 4, Category::kFrozen));
  ZEROD_ASSIGN_OR_RETURN(w.small_, device.allocate(layers * z.small * 4, Category::kFrozen));
  ZEROD_ASSIGN_OR_RETURN(w.nf4_, device.allocate(layers * z.nf4, Category::kFrozen));
  ZEROD_ASSIGN_OR_RETURN(w.staging_, device.allocate(unit * 4, Category::kWorkspace));
  ZEROD_ASSIGN_OR_RETURN(Buffer read, device.allocate(read_numel(L) * 4, Category::kWorkspace, Tier::kHost));
  ZEROD_ASSIGN_OR_RETURN(Buffer packed, device.allocate(z.small * 4 + z.nf4, Category::kWorkspace, Tier::kHost));
  float* host = read.host<float>();

  ZEROD_RETURN_IF_ERROR(init(L.unit_begin(0), L.unit_begin(0) + emb, host));
  ZEROD_RETURN_IF_ERROR(init(L.unit_begin(L.final_unit()), L.unit_begin(L.final_unit()) + fin, host + emb));
  device.copy(s, w.globals_buf_.data(), host, (emb + fin) * 4);
  ZEROD_RETURN_IF_ERROR(device.synchronize(s));
  w.globals_ = global_weight_views(w.convert_, L, DType::kF32, w.globals_buf_.data(),
                                   w.globals_buf_.ptr<float>() + emb, nullptr);

  for (int l = 0; l < layers; ++l) {
    const int64_t begin = L.unit_begin(GptLayout::layer_unit(l));
    ZEROD_RETURN_IF_ERROR(init(begin, begin + unit, host));
    float* small_out = packed.host<float>();
    for (int id : w.small_ids_) {
      const ParamTensorInfo& t = L.tensor(id);
      small_out = std::copy_n(host + t.unit_offset, t.numel, small_out);
    }
    uint8_t* nf4_host = packed.host<uint8_t>() + z.small * 4;
    uint8_t* nf4_dev = w.nf4_.ptr<uint8_t>() + l * z.nf4;
    std::array<Nf4Tensor, 4>& m = w.matrices_.emplace_back();
    for (size_t k = 0; k < kMatrices.size(); ++k) {
      const ParamTensorInfo& t = L.tensor(kMatrices[k]);
      nf4_quantize(host + t.unit_offset, carve(nf4_host, t.numel));
      m[k] = carve(nf4_dev, t.numel);
      nf4_host += matrix_bytes(t.numel);
      nf4_dev += matrix_bytes(t.numel);
    }
    device.copy(s, w.small_.ptr<float>() + l * z.small, packed.data(), z.small * 4);
    device.copy(s, w.nf4_.ptr<uint8_t>() + l * z.nf4, packed.host<uint8_t>() + z.small * 4, z.nf4);
    ZEROD_RETURN_IF_ERROR(device.synchronize(s));  // before the next layer reuses the host buffers
  }
  return w;
}

absl::StatusOr<LayerWeights> Nf4Weights::layer(int l) {
  const GptLayout& L = *layout_;
  float* unit = staging_.ptr<float>();
  const float* small = small_.ptr<float>() + l * small_numel_;
  for (int id : small_ids_) {
    const ParamTensorInfo& t = L.tensor(id);
    device_->copy(convert_.stream, unit + t.unit_offset, small, t.numel * 4);
    small += t.numel;
  }
  for (size_t k = 0; k < kMatrices.size(); ++k) {
    convert_.kernels.nf4_dequantize(convert_.stream, matrices_[l][k], unit + L.tensor(kMatrices[k]).unit_offset);
  }
  return layer_weight_views(convert_, L, DType::kF32, unit, nullptr);
}

}  // namespace zerod
