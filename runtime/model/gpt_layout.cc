#include "runtime/model/gpt_layout.h"

#include <cmath>

namespace zerod {

GptLayout::GptLayout(const GptConfig& c) : config_(c) {
  const int64_t L = c.n_layer, C = c.n_embd, V = c.vocab_size, T = c.block_size;
  struct Spec {
    const char* name;
    std::vector<int64_t> layer_shape;
    bool per_layer, decay;
  };
  const Spec specs[kNumParamTensors] = {
      {"wte", {V, C}, false, true},          {"wpe", {T, C}, false, true},
      {"ln_1.weight", {C}, true, false},     {"ln_1.bias", {C}, true, false},
      {"attn.c_attn.weight", {C, 3 * C}, true, true}, {"attn.c_attn.bias", {3 * C}, true, false},
      {"attn.c_proj.weight", {C, C}, true, true},     {"attn.c_proj.bias", {C}, true, false},
      {"ln_2.weight", {C}, true, false},     {"ln_2.bias", {C}, true, false},
      {"mlp.c_fc.weight", {C, 4 * C}, true, true},    {"mlp.c_fc.bias", {4 * C}, true, false},
      {"mlp.c_proj.weight", {4 * C, C}, true, true},  {"mlp.c_proj.bias", {C}, true, false},
      {"ln_f.weight", {C}, false, false},    {"ln_f.bias", {C}, false, false},
  };
  int64_t offset = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const Spec& s = specs[i];
    int64_t layer_numel = 1;
    for (int64_t d : s.layer_shape) layer_numel *= d;
    std::vector<int64_t> shape = s.layer_shape;
    if (s.per_layer) shape.insert(shape.begin(), L);
    const int64_t numel = layer_numel * (s.per_layer ? L : 1);
    tensors_[i] = {s.name, shape, offset, numel, layer_numel, s.per_layer, s.decay};
    offset += numel;
  }
  num_params_ = offset;
}

double NormalRng::next() {
  // Box-Muller over our own uniform draws (std::normal_distribution differs by library).
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  have_spare_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

void init_gpt_params(const GptLayout& layout, uint64_t seed, float* params) {
  NormalRng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * layout.config().n_layer);
  for (int id = 0; id < kNumParamTensors; ++id) {
    const ParamTensorInfo& t = layout.tensor(id);
    float* p = params + t.offset;
    if (id == kLn1W || id == kLn2W || id == kLnfW) {
      for (int64_t i = 0; i < t.numel; ++i) p[i] = 1.0f;
    } else if (!t.decay) {
      for (int64_t i = 0; i < t.numel; ++i) p[i] = 0.0f;
    } else {
      const double std = (id == kAttProjW || id == kFcProjW) ? residual_std : 0.02;
      for (int64_t i = 0; i < t.numel; ++i) p[i] = static_cast<float>(rng.next() * std);
    }
  }
}

}  // namespace zerod
