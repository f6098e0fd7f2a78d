// The flat parameter layout of a decoder: one buffer holding the
// embeddings (GPT-2's wte and wpe, a Llama's embed_tokens), then each
// layer's tensors back to back, then the final norm (and a Llama's own
// head). These three kinds of contiguous range are the model's units:
// the pieces ZeRO partitions, gathers and reduce-scatters whole, so a layer
// is always one range of the buffer.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "runtime/model/gpt_config.h"
#include "runtime/model/lora_config.h"

namespace zerod {

// GPT-2's tensors; a Llama holds those of them it has (ParamTensorInfo's
// numel 0 for the others) under its own names: kWte embed_tokens, kLn1W
// input_layernorm, kQkvW its q, k and v products side by side (kQkvB their
// biases, Qwen2's), kAttProjW o_proj, kLn2W post_attention_layernorm, kFcW
// gate and up side by side, kFcProjW down_proj, kLnfW the final norm, and
// kLmHead an untied head ([V, C], as embed_tokens).
enum ParamId : int {
  kWte, kWpe, kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB,
  kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kLnfW, kLnfB,
  // LoRA adapters, A and B of each target product (lora_ids()): the only
  // tensors of an adapter layout, absent from the model's.
  kQkvLoraA, kQkvLoraB, kAttProjLoraA, kAttProjLoraB, kFcLoraA, kFcLoraB, kFcProjLoraA, kFcProjLoraB,
  // A Llama's targets 4-6 (gate_proj, up_proj, down_proj; lora_config.h);
  // its first four take GPT-2's ids, whatever their names.
  kLora4A, kLora4B, kLora5A, kLora5B, kLora6A, kLora6B,
  // Last, so that the ids before it (which seed their tensors' draws) are
  // GPT-2's own.
  kLmHead,
  kNumParamTensors
};
// A target's A; its B is the id after.
inline constexpr int lora_a_id(int target) { return kQkvLoraA + 2 * target; }
// The products adapters sit beside (both architectures have these four).
inline constexpr std::array<int, 4> kLoraProductWeights = {kQkvW, kAttProjW, kFcW, kFcProjW};
// Target t's product weight in a model of architecture a.
inline int lora_target_product(Arch a, int t) {
  if (a != Arch::kLlama) return kLoraProductWeights[t];
  constexpr int kLlama[kNumLoraTargets] = {kQkvW, kQkvW, kQkvW, kAttProjW, kFcW, kFcW, kFcProjW};
  return kLlama[t];
}

struct ParamTensorInfo {
  const char* name;
  std::vector<int64_t> shape;  // of one layer's tensor (HF orientation: weights [in, out])
  int64_t numel;               // of one layer's tensor; 0 for one the layout does not hold
  int64_t unit_offset;         // elements from the start of its unit
  bool per_layer;
  bool decay;                  // weight decay applies (not to biases and LayerNorm gains)
};

// One tensor of one layer (layer 0 for the global tensors) in the flat buffer.
struct ParamSegment {
  int id, layer;
  int64_t offset, numel;
  bool decay;
};

class GptLayout {
 public:
  // The model's parameters.
  explicit GptLayout(const GptConfig& c);
  // The LoRA adapters of a model of shape c: per layer, A [in, r] and B
  // [r, out] of each target product, in the layer's unit; the embedding and
  // final units are empty.
  static GptLayout adapters(const GptConfig& c, const LoraConfig& lora);

  const GptConfig& config() const { return config_; }
  // The adapters' settings, for an adapter layout; null otherwise.
  const LoraConfig* lora() const { return lora_ ? &*lora_ : nullptr; }
  const ParamTensorInfo& tensor(int id) const { return tensors_[id]; }
  int64_t num_params() const { return num_params_; }

  // Units: 0 holds the embeddings, 1 + l layer l, n_layer + 1 the final
  // norm (and an untied head).
  int num_units() const { return config_.n_layer + 2; }
  static int layer_unit(int layer) { return layer + 1; }
  int final_unit() const { return config_.n_layer + 1; }
  int unit_of(int id, int layer) const;
  int64_t unit_begin(int u) const { return unit_begin_[u]; }
  int64_t unit_numel(int u) const { return unit_begin_[u + 1] - unit_begin_[u]; }

  // Flat offset of `id`'s tensor in `layer` (layer is ignored for global tensors).
  int64_t offset(int id, int layer) const { return unit_begin(unit_of(id, layer)) + tensors_[id].unit_offset; }
  // Every tensor of every layer, in flat order.
  const std::vector<ParamSegment>& segments() const { return segments_; }

 private:
  GptLayout(const GptConfig& c, std::optional<LoraConfig> lora);

  GptConfig config_;
  std::optional<LoraConfig> lora_;
  std::array<ParamTensorInfo, kNumParamTensors> tensors_;
  std::vector<int64_t> unit_begin_;  // num_units + 1 entries
  std::vector<ParamSegment> segments_;
  int64_t num_params_ = 0;
};

// Standard normal draws that are the same on every standard library. Each
// pair of draws consumes exactly two 64-bit words, so skip() is exact.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : gen_(seed) {}
  double next();
  // Skips n normal draws.
  void skip(uint64_t n);
  uint64_t next_u64() { return gen_(); }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  // Skips n uniform draws.
  void skip_uniform(uint64_t n) { gen_.discard(n); }

 private:
  std::mt19937_64 gen_;
  bool have_spare_ = false;
  double spare_ = 0;
};

// Where each segment's stream stands after the last range drawn from it
// with these cursors: a caller that fills the parameters a part at a time
// (a GPU's through 4 MiB of host staging) goes on from there rather than
// skipping each stream from its start for every part. Safe to share
// between threads.
class InitCursors {
 public:
  // Segment `segment`'s stream (seeded `stream`) at draw `at`, normal or
  // uniform draws.
  NormalRng take(size_t segment, uint64_t stream, int64_t at, bool normal);
  // r is that stream at draw `at`.
  void keep(size_t segment, uint64_t stream, int64_t at, const NormalRng& r);

 private:
  struct Cursor {
    uint64_t stream;
    int64_t at;
    NormalRng rng;
  };
  std::mutex mu_;
  std::map<size_t, Cursor> cursors_;
};

// GPT-2 initialisation: weights N(0, 0.02), residual projections
// N(0, 0.02/sqrt(2*n_layer)) (a Llama's N(0, 0.02), as transformers'
// initializer_range), biases 0, norm gains 1; an adapter
// layout's A as PEFT draws it (U(-1/sqrt(in), 1/sqrt(in))) and B zero. Each segment draws
// from its own seeded stream, so any range of the flat buffer can be filled
// on its own (a rank initialises just its shard): out[i] = parameter
// begin+i, the same bits whatever the ranges, the cursors and the host's
// threads.
void init_gpt_range(const GptLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out,
                    InitCursors* cursors = nullptr);
inline void init_gpt_params(const GptLayout& layout, uint64_t seed, float* params) {
  init_gpt_range(layout, seed, 0, layout.num_params(), params);
}

}  // namespace zerod
