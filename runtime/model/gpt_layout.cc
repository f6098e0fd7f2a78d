#include "runtime/model/gpt_layout.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "runtime/kernels/ops/hd.h"

namespace zerod {

namespace {

struct TensorSpec {
  const char* name;
  std::vector<int64_t> shape;
  bool per_layer, decay;
};

// Each target's A [in, r] and B [r, out], named for its product: GPT-2's
// targets, then a Llama's.
constexpr const char* kAdapterNames[2][kNumLoraTargets][2] = {{{"attn.c_attn.lora_A", "attn.c_attn.lora_B"},
                                                               {"attn.c_proj.lora_A", "attn.c_proj.lora_B"},
                                                               {"mlp.c_fc.lora_A", "mlp.c_fc.lora_B"},
                                                               {"mlp.c_proj.lora_A", "mlp.c_proj.lora_B"},
                                                               {"", ""},
                                                               {"", ""},
                                                               {"", ""}},
                                                              {{"self_attn.q_proj.lora_A", "self_attn.q_proj.lora_B"},
                                                               {"self_attn.k_proj.lora_A", "self_attn.k_proj.lora_B"},
                                                               {"self_attn.v_proj.lora_A", "self_attn.v_proj.lora_B"},
                                                               {"self_attn.o_proj.lora_A", "self_attn.o_proj.lora_B"},
                                                               {"mlp.gate_proj.lora_A", "mlp.gate_proj.lora_B"},
                                                               {"mlp.up_proj.lora_A", "mlp.up_proj.lora_B"},
                                                               {"mlp.down_proj.lora_A", "mlp.down_proj.lora_B"}}};

// Every tensor id's name (GPT-2's, or a Llama's), shape and kind, adapters
// of rank r; whether the model has it at all is in_model's.
std::array<TensorSpec, kNumParamTensors> tensor_specs(const GptConfig& c, int64_t r) {
  const int64_t C = c.n_embd, V = c.vocab_size, T = c.block_size;
  const int64_t qkv = c.qkv_width(), F = c.mlp_width(), Fin = c.mlp_in_width();
  const bool llama = c.llama();
  const auto name = [&](const char* gpt2, const char* llama_name) { return llama ? llama_name : gpt2; };
  const auto adapter = [&](int id) -> TensorSpec {
    const int t = (id - kQkvLoraA) / 2, b = (id - kQkvLoraA) % 2;
    const LoraTargetDims d = t < lora_targets_of(c.arch) ? lora_target_dims(c, t) : LoraTargetDims{};
    return {kAdapterNames[llama][t][b], b ? std::vector<int64_t>{r, d.out} : std::vector<int64_t>{d.in, r}, true, true};
  };
  return {{
      {name("wte", "embed_tokens.weight"), {V, C}, false, true},
      {"wpe", {T, C}, false, true},
      {name("ln_1.weight", "input_layernorm.weight"), {C}, true, false},
      {"ln_1.bias", {C}, true, false},
      {name("attn.c_attn.weight", "self_attn.qkv_proj.weight"), {C, qkv}, true, true},
      {name("attn.c_attn.bias", "self_attn.qkv_proj.bias"), {qkv}, true, false},
      {name("attn.c_proj.weight", "self_attn.o_proj.weight"), {C, C}, true, true},
      {"attn.c_proj.bias", {C}, true, false},
      {name("ln_2.weight", "post_attention_layernorm.weight"), {C}, true, false},
      {"ln_2.bias", {C}, true, false},
      {name("mlp.c_fc.weight", "mlp.gate_up_proj.weight"), {C, Fin}, true, true},
      {"mlp.c_fc.bias", {Fin}, true, false},
      {name("mlp.c_proj.weight", "mlp.down_proj.weight"), {F, C}, true, true},
      {"mlp.c_proj.bias", {C}, true, false},
      {name("ln_f.weight", "norm.weight"), {C}, false, false},
      {"ln_f.bias", {C}, false, false},
      adapter(kQkvLoraA),
      adapter(kQkvLoraB),
      adapter(kAttProjLoraA),
      adapter(kAttProjLoraB),
      adapter(kFcLoraA),
      adapter(kFcLoraB),
      adapter(kFcProjLoraA),
      adapter(kFcProjLoraB),
      adapter(kLora4A),
      adapter(kLora4B),
      adapter(kLora5A),
      adapter(kLora5B),
      adapter(kLora6A),
      adapter(kLora6B),
      {"lm_head.weight", {V, C}, false, true},
  }};
}

// Whether the model (not its adapters) has tensor `id`.
bool in_model(const GptConfig& c, int id) {
  switch (id) {
    case kWpe:
    case kLn1B:
    case kAttProjB:
    case kLn2B:
    case kFcB:
    case kFcProjB:
    case kLnfB:
      return !c.llama();
    case kQkvB:
      return !c.llama() || c.qkv_bias;
    case kLmHead:
      return c.llama() && !c.tie_embeddings;
    default:
      return true;
  }
}

// The model's layout holds the model's tensors; an adapter layout its
// targets' A and B.
bool held(const GptConfig& c, const std::optional<LoraConfig>& lora, int id) {
  if (id >= kQkvLoraA && id < kLmHead) {
    const int t = (id - kQkvLoraA) / 2;
    return lora && t < lora_targets_of(c.arch) && lora->targets[t];
  }
  return !lora && in_model(c, id);
}

}  // namespace

GptLayout::GptLayout(const GptConfig& c) : GptLayout(c, std::nullopt) {}

GptLayout GptLayout::adapters(const GptConfig& c, const LoraConfig& lora) { return GptLayout(c, lora); }

GptLayout::GptLayout(const GptConfig& c, std::optional<LoraConfig> lora) : config_(c), lora_(std::move(lora)) {
  const std::array<TensorSpec, kNumParamTensors> specs = tensor_specs(c, lora_ ? lora_->r : 0);
  // Tensors are listed unit by unit, so offsets within a unit run on until
  // the unit changes.
  int64_t unit_numel[3] = {0, 0, 0};  // embeddings, one layer, final LayerNorm
  for (int i = 0; i < kNumParamTensors; ++i) {
    const TensorSpec& s = specs[i];
    int64_t numel = held(c, lora_, i) ? 1 : 0;
    for (int64_t d : s.shape) numel *= d;
    const int kind = s.per_layer ? 1 : (i == kLnfW || i == kLnfB || i == kLmHead ? 2 : 0);
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
  return (id == kLnfW || id == kLnfB || id == kLmHead) ? final_unit() : 0;
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

// How a segment's initial values are made: a constant, normal draws times
// `scale`, or uniform draws in (-scale, scale).
struct SegmentDraw {
  enum Kind { kConstant, kNormal, kUniform } kind;
  double scale;  // kConstant: the value
};
SegmentDraw draw_of(const GptLayout& layout, const ParamSegment& s) {
  if (s.id == kLn1W || s.id == kLn2W || s.id == kLnfW) return {SegmentDraw::kConstant, 1.0};
  const bool adapter = s.id >= kQkvLoraA && s.id < kLmHead;
  if (adapter && (s.id - kQkvLoraA) % 2 == 1) return {SegmentDraw::kConstant, 0.0};  // B: no change
  if (adapter) {
    // A as PEFT draws it: Kaiming-uniform with a = sqrt(5) over fan_in =
    // in, which is U(-1/sqrt(in), 1/sqrt(in)).
    return {SegmentDraw::kUniform, 1.0 / std::sqrt(double(layout.tensor(s.id).shape[0]))};
  }
  if (!s.decay) return {SegmentDraw::kConstant, 0.0};
  const GptConfig& c = layout.config();
  const double residual_std = c.llama() ? 0.02 : 0.02 / std::sqrt(2.0 * c.n_layer);
  return {SegmentDraw::kNormal, (s.id == kAttProjW || s.id == kFcProjW) ? residual_std : 0.02};
}
// r moved on by n normal or uniform draws.
void advance(NormalRng& r, bool normal, int64_t n) {
  if (normal) {
    r.skip(n);
  } else {
    r.skip_uniform(n);
  }
}
// The stream seeded `stream` at draw `at`, from its start.
NormalRng stream_at(uint64_t stream, bool normal, int64_t at) {
  NormalRng r(stream);
  advance(r, normal, at);
  return r;
}

// A part of a segment's draws, [lo, hi) of the flat buffer, from its
// stream at lo.
struct DrawPiece {
  int64_t lo, hi;
  SegmentDraw d;
  NormalRng rng;
};

}  // namespace

NormalRng InitCursors::take(size_t segment, uint64_t stream, int64_t at, bool normal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cursors_.find(segment);
  if (it != cursors_.end() && it->second.stream == stream && it->second.at <= at) {
    NormalRng r = it->second.rng;
    advance(r, normal, at - it->second.at);
    return r;
  }
  return stream_at(stream, normal, at);
}

void InitCursors::keep(size_t segment, uint64_t stream, int64_t at, const NormalRng& r) {
  std::lock_guard<std::mutex> lock(mu_);
  cursors_.insert_or_assign(segment, Cursor{stream, at, r});
}

// The range's draws in pieces on the host's threads, each piece's stream
// stepped on from the last's (one discard chain a range, 0.3 ns a word:
// mt19937_64's discard regenerates its state without tempering), so every
// value is its stream's draw in one pass's order. A normal draw costs
// about 24 ns (Box-Muller's log, sqrt, sin and cos): gpt2-xl's 1.56B took
// 38 s on one thread.
void init_gpt_range(const GptLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out,
                    InitCursors* cursors) {
  // Eight pieces a thread, of at least 64K draws (a piece copies its 2.5 KB
  // generator).
  const int64_t piece = std::max<int64_t>(int64_t{1} << 16, (end - begin) / (8 * std::max(1, omp_get_max_threads())));
  const std::vector<ParamSegment>& segs = layout.segments();
  std::vector<DrawPiece> pieces;
  for (size_t i = 0; i < segs.size(); ++i) {
    const ParamSegment& s = segs[i];
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    const SegmentDraw d = draw_of(layout, s);
    if (d.kind == SegmentDraw::kConstant) {
      std::fill(out + (lo - begin), out + (hi - begin), static_cast<float>(d.scale));
      continue;
    }
    const uint64_t stream = splitmix64(seed ^ splitmix64(uint64_t(s.id) << 32 | uint32_t(s.layer)));
    const bool normal = d.kind == SegmentDraw::kNormal;
    NormalRng r = cursors ? cursors->take(i, stream, lo - s.offset, normal) : stream_at(stream, normal, lo - s.offset);
    for (int64_t a = lo; a < hi; a += piece) {
      const int64_t b = std::min(hi, a + piece);
      pieces.push_back({a, b, d, r});
      advance(r, normal, b - a);
    }
    if (cursors) cursors->keep(i, stream, hi - s.offset, r);
  }
#pragma omp parallel for schedule(dynamic) if (pieces.size() > 1)
  for (size_t k = 0; k < pieces.size(); ++k) {
    const DrawPiece& dp = pieces[k];
    NormalRng rng = dp.rng;  // the thread's own, not beside another piece's in the vector
    float* p = out + (dp.lo - begin);
    const int64_t n = dp.hi - dp.lo;
    if (dp.d.kind == SegmentDraw::kNormal) {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(rng.next() * dp.d.scale);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>((2 * rng.uniform() - 1) * dp.d.scale);
    }
  }
}

}  // namespace zerod
