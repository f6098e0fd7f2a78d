// Packed sequences, the test that proves packing right: a window holding
// several documents (each token's position in its document given) gives
// the loss and the parameter gradients of the same documents run one a
// pass, unpadded; for GPT-2 (learned positions) and the Llama family
// (rotary positions, grouped-query attention), with and without
// activation checkpointing and LoRA, on the CPU: in fp32 within 1e-6 of
// each tensor's norm; with bf16 activations within 2e-2 (the same values
// rounded at the same points, but fp32 sums of other lengths before them
// that may round to the neighbouring bf16 value, 2^-8 apart). The same
// window without its positions (attention crossing documents, positions
// running on) must not pass: the test says by how much it would fail.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model/gpt.h"
#include "runtime/model/lora.h"
#include "tests/fd_check.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::random_vector;

// GPT-2 of 2 layers, 2 heads, width 16, 32 ids.
GptConfig small_gpt2() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 32;
  return c;
}

// Two sequences of T = 24: documents of 5, 1 and 18 tokens, and of 11 and 13.
constexpr int kB = 2, kT = 24;
const std::vector<std::vector<int>> kDocs = {{5, 1, 18}, {11, 13}};

struct Case {
  std::string name;
  bool llama, checkpointing, lora;
  DType act = DType::kF32;
  double tol() const { return act == DType::kF32 ? 1e-6 : 2e-2; }
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// ||a - b|| / ||b|| over one tensor.
double relative_error(const float* a, const float* b, int64_t n) {
  double d = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return r == 0 ? std::sqrt(d) : std::sqrt(d / r);
}

class Packing : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    cfg_ = c.llama ? testing::small_llama() : small_gpt2();
    cfg_.block_size = kT;
    lora_.r = 4;
    lora_.alpha = 6;
    std::fill_n(lora_.targets.begin(), lora_targets_of(cfg_.arch), true);
    base_ = std::make_unique<GptLayout>(cfg_);
    params_.resize(base_->num_params());
    init_gpt_params(*base_, 7, params_.data());
    NormalRng rng(3);
    for (float& p : params_) p += static_cast<float>(0.1 * rng.next());
    if (c.lora) {
      adapter_layout_ = std::make_unique<GptLayout>(GptLayout::adapters(cfg_, lora_));
      adapters_ = random_vector(adapter_layout_->num_params(), 8, 0.2);
    }
    // Each document's targets are its next tokens, its last none (-1): the
    // first token of a document is never a target of the one before.
    for (const auto& sequence : kDocs) {
      for (int len : sequence) {
        for (int i = 0; i < len; ++i) {
          inputs_.push_back(static_cast<int32_t>(rng.next_u64() % cfg_.vocab_size));
          targets_.push_back(i + 1 < len ? static_cast<int32_t>(rng.next_u64() % cfg_.vocab_size) : -1);
          positions_.push_back(i);
        }
      }
    }
  }

  std::unique_ptr<Gpt> model(int B, bool packed) {
    const Case& c = GetParam();
    return *Gpt::create(cfg_, B, kT, c.act, c.checkpointing, rig_.device, *rig_.kernels, false,
                        c.lora ? &lora_ : nullptr, 1, packed);
  }
  const GptLayout& trained() const { return adapter_layout_ ? *adapter_layout_ : *base_; }

  // Loss summed over the counted targets, the gradients of that sum over
  // kB * kT added to *grads: rows [r0, r0 + B*T) as B sequences of T.
  double pass(Gpt& m, std::vector<float>* grads, int64_t r0, int B, int T, const int32_t* positions) {
    auto base = *FlatWeights::create(&m.layout(), DType::kF32, params_.data(), rig_.device, *rig_.kernels);
    std::optional<FlatWeights> ad;
    std::optional<AdaptedWeights> adapted;
    WeightSource* w = &base;
    if (adapter_layout_) {
      ad.emplace(
          *FlatWeights::create(adapter_layout_.get(), DType::kF32, adapters_.data(), rig_.device, *rig_.kernels));
      w = &adapted.emplace(base, *ad);
    }
    FlatGrads sink(&trained(), grads->data());
    const int64_t n = int64_t(B) * T;
    auto loss = m.forward_backward(*w, sink, inputs_.data() + r0, targets_.data() + r0, B, T,
                                   static_cast<float>(double(n) / (kB * kT)), 0, positions);
    EXPECT_TRUE(loss.ok()) << loss.status();
    return loss.ok() ? *loss * double(n) : 0;
  }

  GptConfig cfg_;
  LoraConfig lora_;
  testing::CpuRig rig_;
  std::unique_ptr<GptLayout> base_, adapter_layout_;
  std::vector<float> params_, adapters_;
  std::vector<int32_t> inputs_, targets_, positions_;
};

TEST_P(Packing, AWindowOfDocumentsIsEachDocumentAlone) {
  const int64_t n_grads = trained().num_params();
  std::vector<float> packed(n_grads, 0.0f), alone(n_grads, 0.0f), crossing(n_grads, 0.0f);
  auto pm = model(kB, /*packed=*/true);
  const double packed_loss = pass(*pm, &packed, 0, kB, kT, positions_.data());
  const double crossing_loss = pass(*pm, &crossing, 0, kB, kT, nullptr);

  auto am = model(1, /*packed=*/false);
  double alone_loss = 0;
  int64_t r0 = 0;
  for (const auto& sequence : kDocs) {
    for (int len : sequence) {
      alone_loss += pass(*am, &alone, r0, 1, len, nullptr);
      r0 += len;
    }
  }
  const double tol = GetParam().tol();
  EXPECT_NEAR(packed_loss, alone_loss, tol * std::fabs(alone_loss));
  double worst = 0, worst_crossing = 0;
  for (const ParamSegment& t : trained().segments()) {
    SCOPED_TRACE(::testing::Message() << trained().tensor(t.id).name << " layer " << t.layer);
    const double e = relative_error(packed.data() + t.offset, alone.data() + t.offset, t.numel);
    EXPECT_LE(e, tol);
    worst = std::max(worst, e);
    worst_crossing =
        std::max(worst_crossing, relative_error(crossing.data() + t.offset, alone.data() + t.offset, t.numel));
  }
  // Without the positions the same window attends across documents: its
  // loss and gradients are far outside the bounds above.
  EXPECT_GT(std::fabs(crossing_loss - alone_loss), 1e-3 * std::fabs(alone_loss));
  EXPECT_GT(worst_crossing, 10 * tol);
  std::printf(
      "packed against alone: loss %.9g against %.9g, worst tensor %.2e; crossing documents: loss %.9g, "
      "worst tensor %.2e\n",
      packed_loss, alone_loss, worst, crossing_loss, worst_crossing);
}

INSTANTIATE_TEST_SUITE_P(Models, Packing,
                         ::testing::Values(Case{"Gpt2", false, false, false},
                                           Case{"Gpt2Checkpointed", false, true, false},
                                           Case{"Gpt2Lora", false, false, true}, Case{"Llama", true, false, false},
                                           Case{"LlamaCheckpointed", true, true, false},
                                           Case{"LlamaLora", true, true, true},
                                           Case{"Gpt2Bf16", false, true, false, DType::kBF16},
                                           Case{"LlamaLoraBf16", true, false, true, DType::kBF16}),
                         [](const auto& info) { return info.param.name; });

// Positions the model refuses: for a model not made for them, and any
// that do not count from 0 at a document's start.
TEST(PackingPositions, BadPositionsAreRefusedAndNothingRuns) {
  testing::CpuRig rig;
  GptConfig cfg = small_gpt2();
  cfg.block_size = 8;
  auto plain = *Gpt::create(cfg, 1, 8, DType::kF32, false, rig.device, *rig.kernels);
  auto packed = *Gpt::create(cfg, 1, 8, DType::kF32, false, rig.device, *rig.kernels, false, nullptr, 1, true);
  std::vector<float> params(plain->layout().num_params()), grads(params.size(), 0.0f);
  init_gpt_params(plain->layout(), 7, params.data());
  auto w = *FlatWeights::create(&plain->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
  FlatGrads sink(&plain->layout(), grads.data());
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> good = {0, 1, 2, 0, 1, 0, 1, 2};
  auto refused = plain->forward_backward(w, sink, tokens.data(), tokens.data(), 1, 8, 1.0f, 0, good.data());
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not made for packed"), std::string::npos) << refused.status();
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}, std::vector<int32_t>{0, 1, 3, 4, 5, 6, 7, 8},
        std::vector<int32_t>{0, 1, 2, 0, 2, 3, 4, 5}}) {
    auto r = packed->forward_backward(w, sink, tokens.data(), tokens.data(), 1, 8, 1.0f, 0, bad.data());
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("expected 0 or"), std::string::npos) << r.status();
  }
  for (float g : grads) ASSERT_EQ(g, 0.0f);  // nothing ran
  EXPECT_TRUE(packed->forward_backward(w, sink, tokens.data(), tokens.data(), 1, 8, 1.0f, 0, good.data()).ok());
}

}  // namespace
}  // namespace zerod
