#include "runtime/model/gpt_layout.h"

#include <algorithm>
#include <cmath>

#include "runtime/kernels/cuda/hd.h"

namespace zerod {

GptLayout::GptLayout(const GptConfig& c) : GptLayout(c, std::nullopt) {}

GptLayout GptLayout::adapters(const GptConfig& c, const LoraConfig& lora) { return GptLayout(c, lora); }

GptLayout::GptLayout(const GptConfig& c, std::optional<LoraConfig> lora) : config_(c), lora_(std::move(lora)) {
  const int64_t C = c.n_embd, V = c.vocab_size, T = c.block_size, r = lora_ ? lora_->r : 0;
  struct Spec {
    const char* name;
    std::vector<int64_t> shape;
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
      {"attn.c_attn.lora_A", {C, r}, true, true},     {"attn.c_attn.lora_B", {r, 3 * C}, true, true},
      {"attn.c_proj.lora_A", {C, r}, true, true},     {"attn.c_proj.lora_B", {r, C}, true, true},
      {"mlp.c_fc.lora_A", {C, r}, true, true},        {"mlp.c_fc.lora_B", {r, 4 * C}, true, true},
      {"mlp.c_proj.lora_A", {4 * C, r}, true, true},  {"mlp.c_proj.lora_B", {r, C}, true, true},
  };
  // The model's layout holds the model's tensors; an adapter layout its
  // targets' A and B.
  const auto held = [&](int id) {
    if (id < kQkvLoraA) return !lora_;
    return lora_ && lora_->targets[(id - kQkvLoraA) / 2];
  };
  // Tensors are listed unit by unit, so offsets within a unit run on until
  // the unit changes.
  int64_t unit_numel[3] = {0, 0, 0};  // embeddings, one layer, final LayerNorm
  for (int i = 0; i < kNumParamTensors; ++i) {
    const Spec& s = specs[i];
    int64_t numel = held(i) ? 1 : 0;
    for (int64_t d : s.shape) numel *= d;
    const int kind = s.per_layer ? 1 : (i == kLnfW || i == kLnfB ? 2 : 0);
    tensors_[i] = {s.name, s.shape, numel, unit_numel[kind], s.per_layer, s.decay};
    unit_numel[kind] += numel;
  }
  unit_begin_.push_back(0);
  for (int u = 0; u < num_units(); ++u) {
    const int kind = u == 0 ? 0 : (u == final_unit() ? 2 : 1);
    unit_begin_.push_back(unit_begin_.back() + unit_numel[kind]);
  }
  num_params_ = unit_begin_.back();
  for (int u = 0; u < num_units(); ++u) {
    const bool layer_unit = u > 0 && u < final_unit();
    for (int id = 0; id < kNumParamTensors; ++id) {
      const int layer = layer_unit ? u - 1 : 0;
      if (tensors_[id].numel == 0 || tensors_[id].per_layer != layer_unit || unit_of(id, layer) != u) continue;
      segments_.push_back({id, layer, offset(id, layer), tensors_[id].numel, tensors_[id].decay});
    }
  }
}

int GptLayout::unit_of(int id, int layer) const {
  if (tensors_[id].per_layer) return layer_unit(layer);
  return (id == kLnfW || id == kLnfB) ? final_unit() : 0;
}

double NormalRng::next() {
  // Box-Muller over our own uniform draws (std::normal_distribution differs by
  // library); u1 is taken from (0, 1] so no draw is ever rejected.
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  have_spare_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

void NormalRng::skip(uint64_t n) {
  if (n == 0) return;
  if (have_spare_) {
    have_spare_ = false;
    --n;
  }
  gen_.discard(2 * (n / 2));
  if (n % 2) next();
}

using cuda::splitmix64;

namespace {

// init_gpt_range on one thread.
void init_gpt_piece(const GptLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out) {
  const double residual_std = 0.02 / std::sqrt(2.0 * layout.config().n_layer);
  for (const ParamSegment& s : layout.segments()) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    float* p = out + (lo - begin);
    const int64_t n = hi - lo;
    const uint64_t stream = splitmix64(seed ^ splitmix64(uint64_t(s.id) << 32 | uint32_t(s.layer)));
    if (s.id == kLn1W || s.id == kLn2W || s.id == kLnfW) {
      std::fill(p, p + n, 1.0f);
    } else if (s.id >= kQkvLoraA && (s.id - kQkvLoraA) % 2 == 1) {
      std::fill(p, p + n, 0.0f);  // B: the adapter starts as no change
    } else if (s.id >= kQkvLoraA) {
      // A as PEFT draws it: Kaiming-uniform with a = sqrt(5) over fan_in =
      // in, which is U(-1/sqrt(in), 1/sqrt(in)).
      const double bound = 1.0 / std::sqrt(double(layout.tensor(s.id).shape[0]));
      NormalRng rng(stream);
      rng.skip_uniform(lo - s.offset);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((2 * rng.uniform() - 1) * bound);
    } else if (!s.decay) {
      std::fill(p, p + n, 0.0f);
    } else {
      const double std = (s.id == kAttProjW || s.id == kFcProjW) ? residual_std : 0.02;
      NormalRng rng(stream);
      rng.skip(lo - s.offset);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(rng.next() * std);
    }
  }
}

}  // namespace

// In pieces of 2^21 parameters on the host's threads, each drawn as a
// range of its own: the same bits as one pass. A normal draw costs about
// 23 ns (Box-Muller's log, sqrt, sin and cos), so gpt2-xl's 1.56B took
// 35 s on one thread; a piece skips its segment's stream to its start
// with mt19937_64's discard, which regenerates the state without
// tempering (0.3 ns a word), about 4% more work over gpt2-xl.
void init_gpt_range(const GptLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out) {
  constexpr int64_t kPiece = int64_t{1} << 21;
  const int64_t pieces = (end - begin + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(dynamic) if (pieces > 1)
  for (int64_t k = 0; k < pieces; ++k) {
    const int64_t lo = begin + k * kPiece, hi = std::min(end, lo + kPiece);
    init_gpt_piece(layout, seed, lo, hi, out + (lo - begin));
  }
}

}  // namespace zerod
