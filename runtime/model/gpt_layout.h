// The flat, layer-stacked parameter layout of GPT-2: each of the 16 tensors is
// a slice of one buffer; per-layer tensors hold all layers back to back.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/model/gpt_config.h"

namespace zerod {

enum ParamId : int {
  kWte, kWpe, kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB,
  kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kLnfW, kLnfB, kNumParamTensors
};

struct ParamTensorInfo {
  const char* name;
  std::vector<int64_t> shape;  // including the leading n_layer for per-layer tensors
  int64_t offset;              // elements from the start of the flat buffer
  int64_t numel;               // all layers
  int64_t layer_numel;         // one layer (== numel for global tensors)
  bool per_layer;
  bool decay;                  // weight decay applies (not to biases and LayerNorm gains)
};

class GptLayout {
 public:
  explicit GptLayout(const GptConfig& c);
  const GptConfig& config() const { return config_; }
  const ParamTensorInfo& tensor(int id) const { return tensors_[id]; }
  int64_t num_params() const { return num_params_; }
  // Offset of `id`'s slice for `layer` (layer is ignored for global tensors).
  int64_t offset(int id, int layer) const {
    const ParamTensorInfo& t = tensors_[id];
    return t.offset + (t.per_layer ? layer * t.layer_numel : 0);
  }

 private:
  GptConfig config_;
  std::array<ParamTensorInfo, kNumParamTensors> tensors_;
  int64_t num_params_ = 0;
};

// GPT-2 initialisation into an fp32 flat buffer: weights N(0, 0.02), residual
// projections N(0, 0.02/sqrt(2*n_layer)), biases 0, LayerNorm gains 1.
void init_gpt_params(const GptLayout& layout, uint64_t seed, float* params);

// Standard normal draws that are the same on every standard library.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : gen_(seed) {}
  double next();
  uint64_t next_u64() { return gen_(); }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 gen_;
  bool have_spare_ = false;
  double spare_ = 0;
};

}  // namespace zerod
