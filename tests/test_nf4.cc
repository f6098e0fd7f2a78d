// NF4 quantization (runtime/kernels/ops/nf4.h) against references built
// here: the published table of values (bitsandbytes' NF4 code book), the
// nearest value found by a plain loop over it, and the absmax values
// dequantized from the dynamic map's own table.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/kernels/ops/nf4.h"
#include "runtime/model/gpt.h"
#include "runtime/model/nf4_weights.h"
#include "comm/communicator.h"
#include "runtime/core/memory_plan.h"
#include "shard/frozen_weights.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

// The 16 NF4 values as bitsandbytes publishes them (fp32).
constexpr float kPublished[16] = {-1.0f,
                                  -0.6961928009986877f,
                                  -0.5250730514526367f,
                                  -0.39491748809814453f,
                                  -0.28444138169288635f,
                                  -0.18477343022823334f,
                                  -0.09105003625154495f,
                                  0.0f,
                                  0.07958029955625534f,
                                  0.16093020141124725f,
                                  0.24611230194568634f,
                                  0.33791524171829224f,
                                  0.44070982933044434f,
                                  0.5626170039176941f,
                                  0.7229568362236023f,
                                  1.0f};

// Storage for an NF4 tensor of n weights.
struct Nf4Storage {
  std::vector<uint8_t> codes, absmax_codes;
  std::vector<float> group_absmax, map;
  float offset = NAN;
  Nf4Tensor t;
  explicit Nf4Storage(int64_t n) {
    const Nf4Sizes z = nf4_sizes(n);
    codes.assign(z.code_bytes, 0xAA);
    absmax_codes.assign(z.blocks, 0xAA);
    group_absmax.assign(z.groups, NAN);
    map.assign(kNf4MapValues, NAN);
    t = {codes.data(), absmax_codes.data(), group_absmax.data(), &offset, map.data(), n};
  }
  int code(int64_t i) const { return i % 2 ? codes[i / 2] & 15 : codes[i / 2] >> 4; }
};

// Normal weights at a few scales, blocks of zeros, and n not a multiple
// of the block or of 2.
std::vector<float> weights(int64_t n) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * 0.02f * static_cast<float>(1 + (i / kNf4Block) % 5);
  for (int64_t i = 3 * kNf4Block; i < 4 * kNf4Block; ++i) x[i] = 0.0f;
  x[5 * kNf4Block + 9] = 0.5f;    // the block's absmax: code 15
  x[5 * kNf4Block + 10] = -0.5f;  // code 0
  return x;
}

TEST(Nf4, ValuesAreThePublishedTableBitForBit) {
  const std::array<float, 16>& v = nf4_values();
  for (int k = 0; k < 16; ++k) EXPECT_EQ(v[k], kPublished[k]) << "value " << k;
  EXPECT_EQ(v[kNf4Zero], 0.0f);
}

// Each weight's code is the published value nearest to it over its block's
// absmax (found by a loop over all 16), in the high nibble for even
// weights; a block of zeros codes 0.
// The absmax values' map is bitsandbytes' create_dynamic_map(signed=True):
// its values' bits as bitsandbytes 0.50 gives them (a 4-bit model's files
// carry the whole map; tests/test_bnb_nf4.cc reads one), ascending.
TEST(Nf4, AbsmaxMapIsBitsandbytesDynamicMapBitForBit) {
  const std::pair<int, uint32_t> published[] = {{0, 0xbf7e3333}, {1, 0xbf7a999a},   {64, 0xbdc9eb85},
                                                {120, 0xb8ba1f4b}, {126, 0xb513a3b7}, {127, 0x0},
                                                {128, 0x3513a3b7}, {129, 0x365a1a94}, {200, 0x3e6f3333},
                                                {254, 0x3f7e3333}, {255, 0x3f800000}};
  const Nf4AbsmaxMap& m = nf4_absmax_map();
  for (const auto& [i, want] : published) EXPECT_EQ(std::bit_cast<uint32_t>(m.v[i]), want) << i;
  EXPECT_TRUE(std::is_sorted(std::begin(m.v), std::end(m.v)));
}

TEST(Nf4, CodesAreTheNearestValueOfEachWeightOverItsBlocksAbsmax) {
  const int64_t n = 300 * kNf4Block + 37;
  const std::vector<float> x = weights(n);
  Nf4Storage s(n);
  nf4_quantize(x.data(), s.t);
  for (int64_t b = 0; b * kNf4Block < n; ++b) {
    float a = 0;
    for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) a = std::max(a, std::fabs(x[i]));
    for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
      int best = 7;
      if (a > 0) {
        for (int k = 0; k < 16; ++k) {
          if (std::fabs(x[i] / a - kPublished[k]) < std::fabs(x[i] / a - kPublished[best])) best = k;
        }
      }
      ASSERT_EQ(s.code(i), best) << "weight " << i << " = " << x[i] << ", block absmax " << a;
    }
  }
  EXPECT_EQ(s.code(5 * kNf4Block + 9), 15);
  EXPECT_EQ(s.code(5 * kNf4Block + 10), 0);
  EXPECT_EQ(s.codes.back() & 15, 0) << "the pad nibble after an odd last weight";
}

// Dequantized weights are value * the double-quantized absmax, which is
// the dynamic map's value of its code * its group's absmax + the offset.
// Every weight lies within half the widest gap between NF4 values of its
// block's absmax, plus that absmax's own error, and that error is within
// half the dynamic map's widest step (0.9/64, at the top decade) of its
// group's absmax: large beside a small block's absmax where one block of
// the group is far larger (weights() has one). The worst cases over
// N(0, 0.02) weights are printed.
struct RoundTrip {
  double worst_weight = 0, worst_absmax = 0;  // relative to the block's exact absmax
};

RoundTrip round_trip(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  Nf4Storage s(n);
  nf4_quantize(x.data(), s.t);
  std::vector<float> y(n, NAN);
  nf4_dequantize(s.t, y.data());

  const float* dyn = nf4_absmax_map().v;
  const int64_t blocks = nf4_sizes(n).blocks;
  std::vector<float> exact(blocks, 0.0f);
  for (int64_t i = 0; i < n; ++i) exact[i / kNf4Block] = std::max(exact[i / kNf4Block], std::fabs(x[i]));
  double mean = 0;
  for (float a : exact) mean += a;
  EXPECT_FLOAT_EQ(s.offset, static_cast<float>(mean / blocks));

  float half_gap = 0;
  for (int k = 0; k < 15; ++k) half_gap = std::max(half_gap, (kPublished[k + 1] - kPublished[k]) / 2);
  RoundTrip r;
  for (int64_t b = 0; b < blocks; ++b) {
    const float a = dyn[s.absmax_codes[b]] * s.group_absmax[b / kQuantBlock] + s.offset;
    EXPECT_EQ(a, nf4_block_absmax(s.t, b));
    const double err = std::fabs(double(a) - exact[b]);
    EXPECT_LE(err, 0.9 / 64 / 2 * s.group_absmax[b / kQuantBlock] * (1 + 1e-5)) << "block " << b;
    if (exact[b] > 0) r.worst_absmax = std::max(r.worst_absmax, err / exact[b]);
    for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
      EXPECT_EQ(y[i], kPublished[s.code(i)] * a) << "weight " << i;
      const double e = std::fabs(double(y[i]) - x[i]);
      EXPECT_LE(e, half_gap * exact[b] + err + 1e-7 * exact[b]) << "weight " << i;
      if (exact[b] > 0) r.worst_weight = std::max(r.worst_weight, e / exact[b]);
    }
  }
  return r;
}

TEST(Nf4, RoundTripIsWithinHalfAGapPlusTheDoubleQuantizationError) {
  round_trip(weights(700 * kNf4Block + 5));  // three groups of absmax values
  const int64_t n = 1 << 22;
  std::mt19937_64 rng(23);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(n);
  for (float& w : x) w = normal(rng);
  const RoundTrip r = round_trip(x);
  std::printf(
      "NF4 round trip of %lld N(0, 0.02) weights: worst error %.4f of the block's absmax (half the widest "
      "gap: 0.1519); double-quantized absmax within %.3f%% of the exact one\n",
      static_cast<long long>(n), r.worst_weight, 100 * r.worst_absmax);
  EXPECT_LT(r.worst_absmax, 0.01);
}

// 4 + 8/64 + 32/(64 * 256) bits a weight, and the tensor's one offset and
// its map.
TEST(Nf4, BytesPerWeight) {
  const int64_t n = 1280 * 3840;  // gpt2-large's c_attn
  const Nf4Sizes z = nf4_sizes(n);
  EXPECT_EQ(z.code_bytes, n / 2);
  EXPECT_EQ(z.blocks, n / 64);
  EXPECT_EQ(z.groups, (n / 64 + 255) / 256);
  EXPECT_EQ(z.bytes(), uint64_t(n / 2 + n / 64 + 4 * 300 + 4 + 4 * 256));
  EXPECT_NEAR(8.0 * (z.bytes() - 1024) / n, 4.127, 0.001);
  EXPECT_EQ(nf4_sizes(1).bytes(), 1u + 1 + 4 + 4 + 1024);
  EXPECT_EQ(nf4_sizes(0).bytes(), 4u + 1024);
}

// A linear layer's weight held [rows, cols] dequantizes into its product's
// operands transposed: out[c * ld + r] is weight r * cols + c of the flat
// dequantization, and what lies past the rows of each column is left as it
// was.
TEST(Nf4, TransposedDequantizationIsTheFlatOnesTranspose) {
  const int64_t rows = 70, cols = 3 * kNf4Block + 5, ld = 75;
  const std::vector<float> x = weights(rows * cols);
  Nf4Storage s(rows * cols);
  nf4_quantize(x.data(), s.t);
  std::vector<float> flat(rows * cols), out(cols * ld, -7.0f);
  nf4_dequantize(s.t, flat.data());
  nf4_dequantize_transposed(s.t, rows, cols, ld, out.data());
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < ld; ++r) {
      ASSERT_EQ(out[c * ld + r], r < rows ? flat[r * cols + c] : -7.0f) << r << ", " << c;
    }
  }
}

// A pass over Nf4Weights of a model of shape cfg against one over the
// weights rounded here: each linear layer of a product ([out, in] columns
// of its [in, width] weights, gathered by hand) through the CPU's NF4.
void expect_pass_over_round_trip(const GptConfig& cfg) {
  const int B = 2, T = 16;
  testing::CpuRig rig;
  const GptLayout layout(cfg);
  std::vector<float> params(layout.num_params());
  init_gpt_params(layout, 3, params.data());
  std::vector<float> rounded = params;
  int64_t matrix_params = 0;
  for (int t = 0; t < lora_targets_of(cfg.arch); ++t) {
    const LoraTargetDims d = lora_target_dims(cfg, t);
    for (int l = 0; l < cfg.n_layer; ++l) {
      float* w = rounded.data() + layout.offset(lora_target_product(cfg.arch, t), l);
      std::vector<float> module(int64_t(d.out) * d.in);
      for (int o = 0; o < d.out; ++o) {
        for (int i = 0; i < d.in; ++i) module[int64_t(o) * d.in + i] = w[int64_t(i) * d.width + d.col0 + o];
      }
      Nf4Storage q(static_cast<int64_t>(module.size()));
      nf4_quantize(module.data(), q.t);
      nf4_dequantize(q.t, module.data());
      for (int o = 0; o < d.out; ++o) {
        for (int i = 0; i < d.in; ++i) w[int64_t(i) * d.width + d.col0 + o] = module[int64_t(o) * d.in + i];
      }
      matrix_params += static_cast<int64_t>(module.size());
    }
  }
  ASSERT_NE(rounded, params);
  std::vector<float> merged = params;  // what an export with an NF4 base rounds
  for (int l = 0; l < cfg.n_layer; ++l) {
    for (int id : kLoraProductWeights) nf4_round_trip_product(cfg, id, merged.data() + layout.offset(id, l));
  }
  EXPECT_EQ(merged, rounded);

  MemoryAccountant& acct = MemoryAccountant::global();
  const uint64_t frozen_before = acct.current(Tier::kHost, Category::kFrozen);
  const ParamInit init = [&](int64_t begin, int64_t end, float* out) {
    std::copy(params.begin() + begin, params.begin() + end, out);
    return absl::OkStatus();
  };
  auto nf4 = Nf4Weights::create(&layout, init, nullptr, rig.device, *rig.kernels);
  ASSERT_TRUE(nf4.ok()) << nf4.status();
  MemoryPlan plan;
  plan.add(Nf4Weights::buffers(layout, DType::kF32));
  const uint64_t planned = plan.peaks().peak[static_cast<int>(Tier::kHost)][static_cast<int>(Category::kFrozen)];
  EXPECT_GT(planned, 0u);
  EXPECT_EQ(acct.current(Tier::kHost, Category::kFrozen) - frozen_before, planned);
  uint64_t layer_bytes = 0;
  for (const PlannedBuffer& b : plan.buffers()) {
    if (b.what == "frozen weights: layers, matrices in NF4") layer_bytes = b.bytes;
  }
  int64_t fp32_layer_params = 0;
  for (const ParamSegment& s : layout.segments()) {
    const bool matrix = is_product_weight(s.id);
    if (layout.tensor(s.id).per_layer && !matrix) fp32_layer_params += s.numel;
  }
  // 4 + 8/64 + 32/(64 * 256) bits a weight, and each module's map, offset,
  // last group's absmax and the padding of its floats and codes to 16 bytes.
  const double bits_held = 8.0 * (layer_bytes - 4 * fp32_layer_params), per_weight = 4 + 8.0 / 64 + 32.0 / 16384;
  const int64_t modules = int64_t(cfg.n_layer) * lora_targets_of(cfg.arch);
  EXPECT_GE(bits_held, per_weight * matrix_params + 8.0 * (4 + 1024) * modules);
  EXPECT_LE(bits_held, per_weight * matrix_params + 8.0 * (4 + 1024 + 4 + 2 * 15) * modules);

  auto model = Gpt::create(cfg, B, T, DType::kF32, false, rig.device, *rig.kernels);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37) % cfg.vocab_size;
  const auto loss = [&](WeightSource& w) {
    std::vector<float> grads(layout.num_params(), 0.0f);
    FlatGrads sink(&layout, grads.data());
    return *(*model)->forward_backward(w, sink, tokens.data(), tokens.data() + 1, B, T - 1, 1.0f);
  };
  auto flat = FlatWeights::create(&layout, DType::kF32, rounded.data(), rig.device, *rig.kernels);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(loss(*nf4), loss(*flat));
}

// QLoRA's frozen model: a pass over Nf4Weights is a pass over the model
// whose products are their linear layers' NF4 round trips, each layer taken
// in transformers' orientation (a Llama's q, k and v apart; quantized and
// dequantized here with the CPU's functions) and whose other tensors are as
// given, bit for bit; the accountant holds what the plan says, a layer's
// matrices at 4.127 bits a weight beside its fp32 biases and norms.
TEST(Nf4Weights, APassIsThePassOverTheRoundTrippedLinearLayers) {
  for (const GptConfig cfg : {GptConfig{2, 2, 64, 96, 16}, *gpt_preset("llama-tiny")}) {
    SCOPED_TRACE(arch_name(cfg.arch));
    expect_pass_over_round_trip(cfg);
  }
}

// A table of bf16 operands that runs no kernel: building a frozen NF4 base
// takes none (its globals become operands on the host), so this shows on
// the CPU what a bf16 GPU table's base holds.
class Bf16OperandsNoKernels : public Kernels {
 public:
  DType operand_type() const override { return DType::kBF16; }
  KernelMemory memory() const override { return {KernelBackend::kCuda}; }
  void matmul_forward(Stream&, void*, const void*, const void*, const void*, int64_t, int, int) override { ran(); }
  void matmul_backward(Stream&, void*, float*, float*, const void*, const void*, const void*, int64_t, int,
                       int) override {
    ran();
  }
  void layernorm_forward(Stream&, void*, float*, float*, const void*, const void*, const void*, int64_t,
                         int) override {
    ran();
  }
  void layernorm_backward(Stream&, void*, float*, float*, const void*, const void*, const void*, const float*,
                          const float*, int64_t, int) override {
    ran();
  }
  void attention_forward(Stream&, void*, float*, float*, const void*, int, int, int, int, int,
                         const int32_t*) override {
    ran();
  }
  void attention_backward(Stream&, void*, const void*, const void*, const void*, const float*, float*, int, int, int,
                          int, int, DType, const int32_t*) override {
    ran();
  }
  void rmsnorm_forward(Stream&, void*, float*, const void*, const void*, int64_t, int, float) override { ran(); }
  void rmsnorm_backward(Stream&, void*, float*, const void*, const void*, const void*, const float*, int64_t,
                        int) override {
    ran();
  }
  void swiglu_forward(Stream&, void*, const void*, int64_t, int) override { ran(); }
  void swiglu_backward(Stream&, void*, const void*, const void*, int64_t, int) override { ran(); }
  void rope_forward(Stream&, void*, const float*, const RopeShape&, int64_t) override { ran(); }
  void rope_backward(Stream&, void*, const float*, const RopeShape&, int64_t) override { ran(); }
  void gelu_forward(Stream&, void*, const void*, int64_t) override { ran(); }
  void gelu_backward(Stream&, void*, const void*, const void*, int64_t) override { ran(); }
  void residual_forward(Stream&, void*, const void*, const void*, int64_t) override { ran(); }
  void take_columns(Stream&, void*, const void*, int64_t, int64_t, int64_t, int) override { ran(); }
  void add_columns(Stream&, void*, int64_t, int64_t, const void*, int64_t, int) override { ran(); }
  void embedding_forward(Stream&, void*, const int32_t*, const void*, const void*, int, int, int,
                         const int32_t*) override {
    ran();
  }
  void embedding_backward(Stream&, float*, float*, const void*, const int32_t*, const int32_t*, int, int, int,
                          const int32_t*, const int32_t*) override {
    ran();
  }
  void classifier_logits(Stream&, float*, const void*, int64_t, const void*, int64_t, int, int) override { ran(); }
  void classifier_forward_backward(Stream&, const ClassifierArgs&) override { ran(); }
  void round_to(Stream&, DType, float*, int64_t) override { ran(); }
  void convert_from_f32(Stream&, DType, const float*, void*, int64_t) override { ran(); }
  void convert_to_f32(Stream&, DType, const void*, float*, int64_t) override { ran(); }
  void sum(Stream&, const double*, int64_t, double*) override { ran(); }
  void sum_squares(Stream&, const float*, int64_t, double*) override { ran(); }
  void update_factor(Stream&, const double*, int, double, double, float*, double*) override { ran(); }
  void add(Stream&, float*, const float*, int64_t) override { ran(); }
  void scale(Stream&, void*, float, int64_t) override { ran(); }
  void dropout(Stream&, void*, const void*, int64_t, float, uint64_t) override { ran(); }
  void adam(Stream&, const AdamTensor&, const AdamStep&) override { ran(); }
  void adam8bit(Stream&, const Adam8bitTensor&, const AdamStep&) override { ran(); }
  void nf4_dequantize(Stream&, const Nf4Tensor&, const Nf4Transpose&, void*) override { ran(); }

 private:
  static void ran() { ADD_FAILURE() << "a kernel ran while the base was built"; }
};

// Each global tensor view of `g` holds the bf16 rounding of the model's
// values (to nearest even, as the GPU's conversion), bit for bit.
void expect_bf16_globals(const GptLayout& layout, const std::vector<float>& params, const GlobalWeights& g) {
  const std::pair<int, const void*> views[] = {
      {kWte, g.wte}, {kWpe, g.wpe}, {kLnfW, g.lnfw}, {kLnfB, g.lnfb}, {kLmHead, g.lm_head}};
  int checked = 0;
  for (const auto& [id, view] : views) {
    const int64_t n = layout.tensor(id).numel;
    ASSERT_EQ(view == nullptr, n == 0) << id;
    if (n == 0) continue;
    const float* want = params.data() + layout.offset(id, 0);
    const auto* got = static_cast<const uint16_t*>(view);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], float_to_bf16(want[i])) << "tensor " << id << ", " << i;
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

// A QLoRA base on a table of bf16 operands holds its embeddings, final
// norm and head as bf16 operands, the GPU's rounding of its values, and
// no fp32 copy: below stage 3 (Nf4Weights, the accountant's frozen bytes
// the plan's) and at stage 3 (the packed units' global words gathered
// and viewed as bf16).
TEST(Nf4Weights, ABf16TablesBaseHoldsItsGlobalsAsBf16Operands) {
  for (const GptConfig cfg : {GptConfig{2, 2, 64, 97, 16}, *gpt_preset("llama-tiny")}) {
    SCOPED_TRACE(arch_name(cfg.arch));
    const GptLayout layout(cfg);
    std::vector<float> params(layout.num_params());
    init_gpt_params(layout, 11, params.data());
    const ParamInit init = [&](int64_t begin, int64_t end, float* out) {
      std::copy(params.begin() + begin, params.begin() + end, out);
      return absl::OkStatus();
    };
    testing::CpuRig rig;
    Bf16OperandsNoKernels table;
    MemoryAccountant& acct = MemoryAccountant::global();
    const uint64_t before = acct.current(Tier::kHost, Category::kFrozen);
    {
      auto nf4 = Nf4Weights::create(&layout, init, nullptr, rig.device, table);
      ASSERT_TRUE(nf4.ok()) << nf4.status();
      MemoryPlan plan;
      plan.add(Nf4Weights::buffers(layout, DType::kBF16));
      EXPECT_EQ(acct.current(Tier::kHost, Category::kFrozen) - before,
                plan.peaks().peak[static_cast<int>(Tier::kHost)][static_cast<int>(Category::kFrozen)]);
      auto g = nf4->globals();
      ASSERT_TRUE(g.ok());
      expect_bf16_globals(layout, params, *g);
    }
    ZeroSettings settings;
    settings.zero.stage = 3;
    settings.precision = DType::kBF16;
    settings.operands = DType::kBF16;
    settings.init = init;
    auto comm = make_local_communicator();
    auto frozen = FrozenWeights::create(layout, settings, /*nf4=*/true, *comm, rig.device, table);
    ASSERT_TRUE(frozen.ok()) << frozen.status();
    auto g = (*frozen)->weights().globals();
    ASSERT_TRUE(g.ok()) << g.status();
    expect_bf16_globals(layout, params, *g);
    ASSERT_TRUE((*frozen)->weights().end_pass().ok());
  }
}

}  // namespace
}  // namespace zerod
