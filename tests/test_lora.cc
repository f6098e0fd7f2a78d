// LoRA's product (runtime/model/lora.h) on the CPU table against a naive
// reference that merges the adapter into the weight explicitly,
// W + s·A·B, in double; its gradients against central finite differences.
#include "runtime/model/lora.h"

#include "runtime/model/gpt.h"
#include "runtime/model/gpt_layout.h"
#include "runtime/model/lora_config.h"
#include "runtime/model/weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/fd_check.h"
#include "tests/float_compare.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::random_vector;

constexpr int64_t kN = 7;
constexpr int kIn = 12, kOut = 9, kR = 3;
constexpr float kScale = 8.0f / kR;  // alpha 8

struct Product {
  testing::CpuRig rig;
  std::vector<float> x = random_vector(kN * kIn, 1), w = random_vector(kIn * kOut, 2, 0.3),
                     bias = random_vector(kOut, 3), a = random_vector(kIn * kR, 4, 0.5),
                     b = random_vector(kR * kOut, 5, 0.5);
  std::vector<float> u = std::vector<float>(kN * kR), t = std::vector<float>(kN * kOut);
  Stream& s() { return rig.device.compute_stream(); }
  LoraWeights lora() const { return {a.data(), b.data(), kR, kScale}; }

  // y = x·W + b + s·(x·A)·B through the table.
  std::vector<float> forward() {
    std::vector<float> y(kN * kOut);
    rig.kernels->matmul_forward(s(), y.data(), x.data(), w.data(), bias.data(), kN, kIn, kOut);
    lora_forward(*rig.kernels, s(), {kN, kIn, kOut}, lora(), x.data(), y.data(), u.data(), t.data());
    EXPECT_TRUE(rig.device.synchronize(s()).ok());
    return y;
  }
};

// x·(W + s·A·B) + b, every sum in double.
std::vector<double> merged_forward(const Product& p) {
  std::vector<double> merged(kIn * kOut);
  for (int i = 0; i < kIn; ++i) {
    for (int o = 0; o < kOut; ++o) {
      double ab = 0;
      for (int j = 0; j < kR; ++j) ab += double(p.a[i * kR + j]) * p.b[j * kOut + o];
      merged[i * kOut + o] = p.w[i * kOut + o] + double(kScale) * ab;
    }
  }
  std::vector<double> y(kN * kOut);
  for (int64_t n = 0; n < kN; ++n) {
    for (int o = 0; o < kOut; ++o) {
      double acc = p.bias[o];
      for (int i = 0; i < kIn; ++i) acc += double(p.x[n * kIn + i]) * merged[i * kOut + o];
      y[n * kOut + o] = acc;
    }
  }
  return y;
}

TEST(Lora, ForwardIsTheProductWithTheAdapterMergedIntoTheWeight) {
  Product p;
  const std::vector<float> y = p.forward();
  const std::vector<double> want = merged_forward(p);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
}

// PEFT's start: B = 0, so the first pass is the base model's, bit for bit.
TEST(Lora, WithBZeroTheProductIsTheBasesBitForBit) {
  Product p;
  std::fill(p.b.begin(), p.b.end(), 0.0f);
  const std::vector<float> y = p.forward();
  std::vector<float> base(kN * kOut);
  cpu::matmul_forward(base.data(), p.x.data(), p.w.data(), p.bias.data(), kN, kIn, kOut);
  EXPECT_EQ(testing::bits(y), testing::bits(base));
}

// The loss sum(y * R): A's and B's gradients along random directions
// against central differences of the table's own forward, and x's adapter
// gradient against s·R·Bᵀ·Aᵀ in double. Gradients add to what is there.
TEST(Lora, GradientsOfAAndBMatchFiniteDifferences) {
  Product p;
  const std::vector<float> r = random_vector(kN * kOut, 6);
  const auto loss = [&] {
    const std::vector<float> y = p.forward();
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += double(y[i]) * r[i];
    return l;
  };
  p.forward();  // fills u
  std::vector<float> ga(kIn * kR, 0.5f), gb(kR * kOut, -0.25f), dx(kN * kIn, 1.0f), du(kN * kR), dt(kN * kIn);
  lora_backward(*p.rig.kernels, p.s(), {kN, kIn, kOut}, p.lora(), {ga.data(), gb.data()}, p.x.data(), p.u.data(),
                r.data(), dx.data(), du.data(), dt.data());
  ASSERT_TRUE(p.rig.device.synchronize(p.s()).ok());
  for (float& g : ga) g -= 0.5f;
  for (float& g : gb) g += 0.25f;
  for (float& g : dx) g -= 1.0f;

  for (int trial = 0; trial < 3; ++trial) {
    const std::vector<float> da = random_vector(ga.size(), 10 + trial), db = random_vector(gb.size(), 20 + trial);
    const double fd_a = testing::directional_fd(loss, p.a.data(), da, 1e-2);
    const double fd_b = testing::directional_fd(loss, p.b.data(), db, 1e-2);
    EXPECT_NEAR(testing::dot(ga.data(), da), fd_a, 2e-3 * (1 + std::fabs(fd_a))) << "A, direction " << trial;
    EXPECT_NEAR(testing::dot(gb.data(), db), fd_b, 2e-3 * (1 + std::fabs(fd_b))) << "B, direction " << trial;
  }
  for (int64_t n = 0; n < kN; ++n) {
    for (int i = 0; i < kIn; ++i) {
      double want = 0;
      for (int j = 0; j < kR; ++j) {
        double rb = 0;
        for (int o = 0; o < kOut; ++o) rb += double(r[n * kOut + o]) * p.b[j * kOut + o];
        want += kScale * rb * p.a[i * kR + j];
      }
      EXPECT_NEAR(dx[n * kIn + i], want, 1e-5 * (1 + std::fabs(want))) << n << ", " << i;
    }
  }
}

// A LoRA pass of a small GPT-2 with adapters on all four products, or of a
// small Llama (grouped-query, an untied head) with adapters on all seven
// (q, k and v, gate and up, each on its columns of a fused product): the
// frozen model's weights from one flat buffer, the adapters from another,
// gradients into an adapter-shaped buffer only.
GptConfig small_model(bool llama) {
  return llama ? testing::small_llama() : GptConfig{2, 2, 16, 32, 8};  // n_layer, n_head, n_embd, vocab, block
}

struct LoraModel {
  GptConfig cfg;
  LoraConfig lora = [] {
    LoraConfig c;
    c.r = 4;
    c.alpha = 6;
    return c;
  }();
  int B = 2, T = 8;
  testing::CpuRig rig;
  GptLayout adapter_layout = GptLayout::adapters(cfg, lora);
  std::unique_ptr<Gpt> model;
  std::vector<float> params, adapters;
  std::vector<int32_t> inputs, targets;

  explicit LoraModel(bool checkpointing = false, double dropout = 0, bool llama = false) : cfg(small_model(llama)) {
    lora.dropout = dropout;
    std::fill_n(lora.targets.begin(), lora_targets_of(cfg.arch), true);
    adapter_layout = GptLayout::adapters(cfg, lora);
    model = *Gpt::create(cfg, B, T, DType::kF32, checkpointing, rig.device, *rig.kernels, false, &lora);
    params.resize(model->layout().num_params());
    init_gpt_params(model->layout(), 7, params.data());
    NormalRng rng(3);
    for (float& p : params) p += static_cast<float>(0.1 * rng.next());
    adapters = random_vector(adapter_layout.num_params(), 8, 0.2);
    for (int i = 0; i < B * T; ++i) {
      inputs.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
      targets.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
    }
  }

  // The mean loss; the adapters' gradients into *grads when given.
  double loss(std::vector<float>* grads = nullptr) {
    auto base = *FlatWeights::create(&model->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
    auto ad = *FlatWeights::create(&adapter_layout, DType::kF32, adapters.data(), rig.device, *rig.kernels);
    AdaptedWeights w(base, ad);
    std::vector<float> scratch(adapters.size(), 0.0f);
    if (grads) grads->assign(adapters.size(), 0.0f);
    FlatGrads sink(&adapter_layout, grads ? grads->data() : scratch.data());
    return *model->forward_backward(w, sink, inputs.data(), targets.data(), B, T, 1.0f, /*dropout_seed=*/5);
  }

  // The same tokens through the model without adapters whose weights are
  // `weights`.
  double plain_loss(std::vector<float> weights) {
    auto plain = *Gpt::create(cfg, B, T, DType::kF32, false, rig.device, *rig.kernels);
    auto w = *FlatWeights::create(&plain->layout(), DType::kF32, weights.data(), rig.device, *rig.kernels);
    std::vector<float> grads(weights.size(), 0.0f);
    FlatGrads sink(&plain->layout(), grads.data());
    return *plain->forward_backward(w, sink, inputs.data(), targets.data(), B, T, 1.0f);
  }

  // The B tensors of every adapter set to zero.
  void zero_b() {
    for (const ParamSegment& s : adapter_layout.segments()) {
      if ((s.id - kQkvLoraA) % 2 == 1) std::fill_n(adapters.begin() + s.offset, s.numel, 0.0f);
    }
  }
};

// PEFT's start (B = 0): the first loss is the model's own, bit for bit; A
// gets no gradient yet, B one.
TEST(LoraModelTest, WithBZeroTheLossIsTheModelsBitForBit) {
  for (const bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama" : "gpt2");
    LoraModel m(false, 0, llama);
    m.zero_b();
    std::vector<float> grads;
    const double loss = m.loss(&grads);
    EXPECT_EQ(loss, m.plain_loss(m.params));
    double a_norm = 0, b_norm = 0;
    for (const ParamSegment& s : m.adapter_layout.segments()) {
      for (int64_t i = 0; i < s.numel; ++i)
        ((s.id - kQkvLoraA) % 2 ? b_norm : a_norm) += std::fabs(grads[s.offset + i]);
    }
    EXPECT_EQ(a_norm, 0.0);
    EXPECT_GT(b_norm, 1e-3);
  }
}

// Against the naive reference: the model with W + s·A·B written into each
// target weight (in double, rounded once): for a Llama's q, k and v (gate
// and up), into their columns of the fused product, written out here.
TEST(LoraModelTest, TheLossIsTheMergedModelsLoss) {
  for (const bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama" : "gpt2");
    LoraModel m(false, 0, llama);
    std::vector<float> merged = m.params;
    const GptLayout& L = m.model->layout();
    const int C = m.cfg.n_embd, kv = m.cfg.kv_heads() * m.cfg.head_dim(), F = m.cfg.ffn_hidden;
    struct Place {
      int weight, col0;
    };
    const std::vector<Place> places =
        llama ? std::vector<Place>{{kQkvW, 0}, {kQkvW, C}, {kQkvW, C + kv}, {kAttProjW, 0},
                                   {kFcW, 0},  {kFcW, F},  {kFcProjW, 0}}
              : std::vector<Place>{{kQkvW, 0}, {kAttProjW, 0}, {kFcW, 0}, {kFcProjW, 0}};
    for (int l = 0; l < m.cfg.n_layer; ++l) {
      for (size_t t = 0; t < places.size(); ++t) {
        const int64_t width = L.tensor(places[t].weight).shape[1];
        const int64_t in = m.adapter_layout.tensor(lora_a_id(t)).shape[0];
        const int64_t out = m.adapter_layout.tensor(lora_a_id(t) + 1).shape[1];
        const float* a = m.adapters.data() + m.adapter_layout.offset(lora_a_id(t), l);
        const float* b = m.adapters.data() + m.adapter_layout.offset(lora_a_id(t) + 1, l);
        float* w = merged.data() + L.offset(places[t].weight, l) + places[t].col0;
        for (int64_t i = 0; i < in; ++i) {
          for (int64_t o = 0; o < out; ++o) {
            double ab = 0;
            for (int j = 0; j < m.lora.r; ++j) ab += double(a[i * m.lora.r + j]) * b[j * out + o];
            w[i * width + o] = static_cast<float>(w[i * width + o] + double(m.lora.scale()) * ab);
          }
        }
      }
    }
    const double want = m.plain_loss(merged), got = m.loss();
    EXPECT_NEAR(got, want, 1e-5 * want);
    EXPECT_GT(std::fabs(got - m.plain_loss(m.params)), 1e-3) << "the adapters change the loss";
  }
}

// The adapters' gradients along random directions and their own, per
// tensor of each layer, against central differences extrapolated from two
// steps: within 1e-3 of the larger of the derivative and 0.05 (the worst
// seen is 2.5e-4).
// With dropout (p 0.3) the masks are the seed's, the same in every pass of
// the check, so the loss is a smooth function of the adapters again.
TEST(LoraModelTest, AdapterGradientsMatchFiniteDifferences) {
  for (const auto& [dropout, llama] : {std::pair{0.0, false}, std::pair{0.3, false}, std::pair{0.0, true},
                                       std::pair{0.3, true}}) {
    LoraModel m(/*checkpointing=*/false, dropout, llama);
    std::vector<float> grads;
    m.loss(&grads);
    for (const ParamSegment& s : m.adapter_layout.segments()) {
      SCOPED_TRACE(::testing::Message() << m.adapter_layout.tensor(s.id).name << ", layer " << s.layer
                                        << ", dropout " << dropout << (llama ? ", llama" : ""));
      const std::vector<float> g(grads.begin() + s.offset, grads.begin() + s.offset + s.numel);
      for (const std::vector<float>& dir : {random_vector(s.numel, 100 + s.offset), g}) {
        // Richardson's extrapolation of two steps: their eps² errors cancel
        // (a product's adapters curve the loss more than its weights do).
        // Dropout's 1/(1 - p) scales the adapters' terms up, and the
        // eps⁴ error left with them: smaller steps there.
        const auto loss = [&] { return m.loss(); };
        const double eps = dropout > 0 ? 2e-3 : 1e-2;
        const double fd1 = testing::directional_fd(loss, m.adapters.data() + s.offset, dir, eps);
        const double fd2 = testing::directional_fd(loss, m.adapters.data() + s.offset, dir, eps / 2);
        const double fd = (4 * fd2 - fd1) / 3;
        const double analytic = testing::dot(g.data(), dir);
        EXPECT_NEAR(analytic, fd, 1e-3 * std::max(std::fabs(fd), 0.05));
      }
    }
  }
}

// Recomputing the blocks in backward gives the same loss and gradients (the
// same dropout masks too).
TEST(LoraModelTest, CheckpointingGivesTheSameBits) {
  for (const auto& [dropout, llama] : {std::pair{0.0, false}, std::pair{0.3, false}, std::pair{0.0, true},
                                       std::pair{0.3, true}}) {
    LoraModel plain(false, dropout, llama), checkpointed(/*checkpointing=*/true, dropout, llama);
    std::vector<float> g1, g2;
    EXPECT_EQ(plain.loss(&g1), checkpointed.loss(&g2));
    EXPECT_EQ(testing::bits(g1), testing::bits(g2));
  }
}

// Dropout on an adapter's input is the explicit product with x' = x·mask /
// (1 - p), the mask read off the table's own dropout of ones.
TEST(Lora, DropoutIsTheProductOfTheMaskedInput) {
  Product p;
  const LoraDropout drop{0.4f, 99};
  std::vector<float> mask(kN * kIn, 1.0f);
  p.rig.kernels->dropout(p.s(), mask.data(), mask.data(), kN * kIn, drop.p, drop.seed);
  std::vector<float> y(kN * kOut, 0.0f), t(kN * std::max(kIn, kOut));
  lora_forward(*p.rig.kernels, p.s(), {kN, kIn, kOut}, p.lora(), p.x.data(), y.data(), p.u.data(), t.data(),
               DType::kF32, drop);
  ASSERT_TRUE(p.rig.device.synchronize(p.s()).ok());
  int64_t kept = 0;
  for (float v : mask) {
    ASSERT_TRUE(v == 0.0f || v == 1.0f / (1.0f - drop.p)) << v;
    kept += v != 0;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, kN * kIn);
  for (int64_t n = 0; n < kN; ++n) {
    for (int o = 0; o < kOut; ++o) {
      double want = 0;
      for (int j = 0; j < kR; ++j) {
        double xa = 0;
        for (int i = 0; i < kIn; ++i) xa += double(p.x[n * kIn + i]) * mask[n * kIn + i] * p.a[i * kR + j];
        want += double(kScale) * xa * p.b[j * kOut + o];
      }
      EXPECT_NEAR(y[n * kOut + o], want, 1e-5 * (1 + std::fabs(want)));
    }
  }
  // Backward of sum(y·R): A's gradient is x'ᵀ·(s·R·Bᵀ), x's the mask times
  // (s·R·Bᵀ)·Aᵀ, all in double.
  const std::vector<float> r = random_vector(kN * kOut, 6);
  std::vector<float> ga(kIn * kR, 0.0f), gb(kR * kOut, 0.0f), dx(kN * kIn, 0.0f), du(kN * kR), dt(kN * kIn);
  lora_backward(*p.rig.kernels, p.s(), {kN, kIn, kOut}, p.lora(), {ga.data(), gb.data()}, p.x.data(), p.u.data(),
                r.data(), dx.data(), du.data(), dt.data(), drop);
  ASSERT_TRUE(p.rig.device.synchronize(p.s()).ok());
  std::vector<double> sdu(kN * kR, 0.0);  // s·R·Bᵀ
  for (int64_t n = 0; n < kN; ++n) {
    for (int j = 0; j < kR; ++j) {
      for (int o = 0; o < kOut; ++o) sdu[n * kR + j] += double(kScale) * r[n * kOut + o] * p.b[j * kOut + o];
    }
  }
  for (int i = 0; i < kIn; ++i) {
    for (int j = 0; j < kR; ++j) {
      double want = 0;
      for (int64_t n = 0; n < kN; ++n) want += double(p.x[n * kIn + i]) * mask[n * kIn + i] * sdu[n * kR + j];
      EXPECT_NEAR(ga[i * kR + j], want, 1e-5 * (1 + std::fabs(want))) << "A " << i << ", " << j;
    }
  }
  for (int64_t n = 0; n < kN; ++n) {
    for (int i = 0; i < kIn; ++i) {
      double want = 0;
      for (int j = 0; j < kR; ++j) want += sdu[n * kR + j] * p.a[i * kR + j];
      EXPECT_NEAR(dx[n * kIn + i], mask[n * kIn + i] * want, 1e-5 * (1 + std::fabs(want))) << "x " << n << ", " << i;
    }
  }
}

// An adapter layout holds A [in, r] and B [r, out] of each target in its
// layer's unit and nothing else; the model's layout holds no adapter.
TEST(LoraLayout, AdaptersOfEachTargetSitInTheirLayersUnit) {
  const GptConfig c{3, 2, 16, 32, 8};
  LoraConfig lora;
  lora.r = 4;
  lora.alpha = 16;
  lora.targets = {true, false, false, true};  // c_attn, mlp.c_proj
  const GptLayout a = GptLayout::adapters(c, lora);
  const int64_t C = 16, r = 4, per_layer = C * r + r * 3 * C + 4 * C * r + r * C;
  EXPECT_EQ(a.num_params(), 3 * per_layer);
  EXPECT_EQ(a.unit_numel(0), 0);
  EXPECT_EQ(a.unit_numel(a.final_unit()), 0);
  ASSERT_EQ(a.segments().size(), 12u);
  const int ids[] = {kQkvLoraA, kQkvLoraB, kFcProjLoraA, kFcProjLoraB};
  const std::vector<int64_t> shapes[] = {{C, r}, {r, 3 * C}, {4 * C, r}, {r, C}};
  int64_t at = 0;
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(a.unit_begin(GptLayout::layer_unit(l)), l * per_layer);
    for (int k = 0; k < 4; ++k) {
      const ParamSegment& s = a.segments()[4 * l + k];
      EXPECT_EQ(s.id, ids[k]);
      EXPECT_EQ(s.layer, l);
      EXPECT_EQ(s.offset, at);
      EXPECT_EQ(a.tensor(s.id).shape, shapes[k]);
      EXPECT_TRUE(s.decay);
      at += s.numel;
    }
  }
  for (int id = 0; id < kQkvLoraA; ++id) EXPECT_EQ(a.tensor(id).numel, 0) << a.tensor(id).name;

  const GptLayout model(c);
  EXPECT_EQ(model.num_params(), gpt_param_count(c));
  EXPECT_EQ(model.segments().size(), 2u + 12 * 3 + 2);
  EXPECT_EQ(model.lora(), nullptr);
  for (int id = kQkvLoraA; id < kNumParamTensors; ++id) EXPECT_EQ(model.tensor(id).numel, 0);

  // Views: the adapters where they are, null for the rest.
  testing::CpuRig rig;
  std::vector<float> buf(a.num_params());
  auto w = FlatWeights::create(&a, DType::kF32, buf.data(), rig.device, *rig.kernels);
  ASSERT_TRUE(w.ok()) << w.status();
  const LayerWeights lw = *w->layer(1);
  EXPECT_EQ(lw.lora[kLoraCAttn].a, buf.data() + per_layer);
  EXPECT_EQ(lw.lora[kLoraCAttn].b, buf.data() + per_layer + C * r);
  EXPECT_EQ(lw.lora[kLoraCAttn].r, 4);
  EXPECT_EQ(lw.lora[kLoraCAttn].scale, 4.0f);
  EXPECT_EQ(lw.lora[kLoraMlpCProj].a, buf.data() + per_layer + C * r + r * 3 * C);
  EXPECT_EQ(lw.lora[kLoraAttnCProj].a, nullptr);
  EXPECT_EQ(lw.lora[kLoraCFc].a, nullptr);
  EXPECT_EQ(lw.qkvw, nullptr);
  EXPECT_EQ(lw.ln1w, nullptr);
  FlatGrads g(&a, buf.data());
  const LayerGrads lg = *g.layer(2);
  EXPECT_EQ(lg.lora[kLoraMlpCProj].b, buf.data() + 2 * per_layer + C * r + r * 3 * C + 4 * C * r);
  EXPECT_EQ(lg.lora[kLoraCFc].a, nullptr);
  EXPECT_EQ(lg.qkvw, nullptr);
  EXPECT_EQ(g.globals()->wte, nullptr);
  lora.use_rslora = true;
  EXPECT_EQ(lora.scale(), 8.0f);  // 16 / sqrt(4)
}

TEST(LoraLayout, BadSettingsAreRefusedNamingTheKey) {
  const auto refused = [](LoraConfig c, const std::string& words) {
    const absl::Status s = validate_lora_config(c, Arch::kGpt2);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s;
  };
  LoraConfig c;
  EXPECT_TRUE(validate_lora_config(c, Arch::kGpt2).ok());
  c.r = 0;
  refused(c, "model.lora.r must be at least 1, got 0");
  c = {};
  c.alpha = -1;
  refused(c, "model.lora.alpha (lora_alpha) must be positive");
  c = {};
  c.dropout = 1;
  refused(c, "model.lora.dropout (lora_dropout) must be in [0, 1)");
  c = {};
  c.targets = {};
  refused(c, "model.lora.target_modules names no module");
}

// A rank past a target's narrower side is refused naming the target: a
// Llama's k_proj is the narrowest of its seven (grouped keys).
TEST(LoraLayout, ARankPastATargetsNarrowerSideIsRefused) {
  const GptConfig m = *gpt_preset("llama-tiny");  // C 64, k_proj and v_proj [64 -> 32]
  LoraConfig c;
  c.targets = {true, true, true, true, true, true, true};
  c.r = 32;
  EXPECT_TRUE(validate_lora_rank(c, m).ok());
  c.r = 33;
  const absl::Status s = validate_lora_rank(c, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "model.lora.r is 33, larger than k_proj [64 -> 32] allows (32)");
  c.targets = {true, false, false, true, true, true, true};  // q, o, gate, up, down: 64 at the narrowest
  EXPECT_TRUE(validate_lora_rank(c, m).ok());
  c.r = 65;
  EXPECT_NE(validate_lora_rank(c, m).message().find("larger than q_proj [64 -> 64]"), std::string::npos);
}

}  // namespace
}  // namespace zerod
