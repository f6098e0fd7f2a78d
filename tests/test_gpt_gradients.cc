// Whole-model gradients of GPT-2 and of Llama shapes (grouped-query with
// its own head; Qwen2's q/k/v biases with a tied one) against central
// finite differences, for every parameter tensor of every layer (and so
// every layer kind in place).
//
// fp32 forward with the loss summed in double. Per tensor: a random direction
// and the gradient's own direction, with eps 1e-2 (relative tolerance 2e-3),
// plus single elements of large gradient (relative tolerance 2e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/model/gpt.h"
#include "tests/fd_check.h"
#include "tests/recording_weights.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::directional_fd;
using testing::dot;
using testing::random_vector;
using testing::Recording;
using testing::RecordingSink;

GptConfig small_gpt2() { return {2, 2, 16, 32, 8}; }  // n_layer, n_head, n_embd, vocab, block
struct Fixture {
  GptConfig cfg;
  int B = 2, T = 8;
  testing::CpuRig rig;
  std::unique_ptr<Gpt> model;
  std::vector<float> params, grads;
  std::vector<int32_t> inputs, targets;

  explicit Fixture(GptConfig c = small_gpt2(), bool checkpointing = false) : cfg(c) {
    model = *Gpt::create(cfg, B, T, DType::kF32, checkpointing, rig.device, *rig.kernels);
    params.resize(model->layout().num_params());
    init_gpt_params(model->layout(), 7, params.data());
    // Larger-than-default weights give every path a gradient well above noise.
    NormalRng rng(3);
    for (float& p : params) p += static_cast<float>(0.1 * rng.next());
    grads.assign(params.size(), 0.0f);
    for (int i = 0; i < B * T; ++i) {
      inputs.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
      targets.push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
    }
  }

  double loss() {
    auto w = *FlatWeights::create(&model->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
    std::vector<float> scratch(params.size(), 0.0f);
    FlatGrads sink(&model->layout(), scratch.data());
    return *model->forward_backward(w, sink, inputs.data(), targets.data(), B, T, 1.0f);
  }

  void compute_grads() {
    std::fill(grads.begin(), grads.end(), 0.0f);
    auto w = *FlatWeights::create(&model->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
    FlatGrads sink(&model->layout(), grads.data());
    ASSERT_TRUE(model->forward_backward(w, sink, inputs.data(), targets.data(), B, T, 1.0f).ok());
  }
};

class GptGradientsOf : public ::testing::TestWithParam<GptConfig> {};

TEST_P(GptGradientsOf, EveryTensorMatchesFiniteDifferences) {
  Fixture fx(GetParam());
  fx.compute_grads();
  auto f = [&] { return fx.loss(); };
  for (const ParamSegment& t : fx.model->layout().segments()) {
    float* p = fx.params.data() + t.offset;
    const float* g = fx.grads.data() + t.offset;
    SCOPED_TRACE(::testing::Message() << fx.model->layout().tensor(t.id).name << " layer " << t.layer);
    const int id = t.id * 16 + t.layer;
    // Along the gradient itself (normalised) and along a random unit direction.
    std::vector<float> along(g, g + t.numel);
    std::vector<float> rnd = random_vector(t.numel, 100 + id);
    for (auto* d : {&along, &rnd}) {
      const double norm = std::sqrt(std::inner_product(d->begin(), d->end(), d->begin(), 0.0));
      ASSERT_GT(norm, 0);
      for (float& x : *d) x = static_cast<float>(x / norm);
    }
    const double gnorm = dot(g, along);  // |g|, since `along` is g / |g|
    ASSERT_GT(gnorm, 1e-5) << "gradient vanishes: nothing to check";
    // A step of 3e-3: the central difference's error falls with its square
    // (along q, k and v's product of the Qwen-like, whose one key and value
    // head serves every query head, 7.5e-3 of 1.29 at 1e-2, 6.8e-4 at 3e-3),
    // and fp32's rounding of the loss stays below 1e-4 of it.
    EXPECT_NEAR(directional_fd(f, p, along, 3e-3), dot(g, along), 2e-3 * gnorm);
    EXPECT_NEAR(directional_fd(f, p, rnd, 3e-3), dot(g, rnd), 2e-3 * gnorm);
    // The three largest single elements of each tensor.
    std::vector<int64_t> idx(t.numel);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + std::min<int64_t>(3, t.numel), idx.end(),
                      [&](int64_t a, int64_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    for (int k = 0; k < std::min<int64_t>(3, t.numel); ++k) {
      std::vector<float> e(t.numel, 0.0f);
      e[idx[k]] = 1.0f;
      const double fd = directional_fd(f, p, e, 1e-2);
      EXPECT_NEAR(fd, g[idx[k]], 2e-2 * std::fabs(g[idx[k]]) + 1e-5) << "element " << idx[k];
    }
  }
}

TEST_P(GptGradientsOf, CheckpointingGivesIdenticalGradients) {
  Fixture plain(GetParam(), false), ckpt(GetParam(), true);
  plain.compute_grads();
  ckpt.compute_grads();
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) ASSERT_EQ(plain.grads[i], ckpt.grads[i]) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GptGradientsOf,
                         ::testing::Values(small_gpt2(), testing::small_llama(false), testing::small_llama(true)),
                         [](const auto& info) {
                           return !info.param.llama() ? "Gpt2" : info.param.qkv_bias ? "QwenLike" : "Llama";
                         });

TEST(GptGradients, GradScaleScalesGradients) {
  Fixture fx;
  fx.compute_grads();
  std::vector<float> scaled(fx.grads.size(), 0.0f);
  auto w = *FlatWeights::create(&fx.model->layout(), DType::kF32, fx.params.data(), fx.rig.device, *fx.rig.kernels);
  FlatGrads sink(&fx.model->layout(), scaled.data());
  ASSERT_TRUE(fx.model->forward_backward(w, sink, fx.inputs.data(), fx.targets.data(), fx.B, fx.T, 4.0f).ok());
  // A power-of-two scale is exact in floating point.
  for (size_t i = 0; i < scaled.size(); ++i) ASSERT_EQ(scaled[i], 4.0f * fx.grads[i]) << "element " << i;
}

// The model returns the first failure of its weight source or gradient
// sink and asks them nothing more: no layer computes on weights that did
// not arrive, no gradient is handed on after one was lost.
TEST(GptGradients, StopsAtTheFirstFailureOfItsWeightsOrGradients) {
  Fixture fx;
  std::vector<float> grads(fx.params.size(), 0.0f);
  auto flat = *FlatWeights::create(&fx.model->layout(), DType::kF32, fx.params.data(), fx.rig.device, *fx.rig.kernels);
  FlatGrads flat_grads(&fx.model->layout(), grads.data());
  // The whole conversation of a two-layer pass, in order.
  Recording all(flat, "");
  RecordingSink all_sink(all, flat_grads);
  ASSERT_TRUE(fx.model->forward_backward(all, all_sink, fx.inputs.data(), fx.targets.data(), fx.B, fx.T, 1.0f).ok());
  const std::vector<std::string> pass = {"globals",       "layer 0",           "prefetch 1 1",      "layer 1",
                                         "prefetch 1 0",  "globals",           "grad globals",      "layer 1",
                                         "prefetch 0 -1", "grad layer 1",      "grad layer_done 1", "layer 0",
                                         "grad layer 0",  "grad layer_done 0", "grad end_backward", "end_pass"};
  ASSERT_EQ(all.calls, pass);
  for (size_t at = 0; at < pass.size(); ++at) {
    SCOPED_TRACE(pass[at]);
    // A call made twice fails at its first occurrence.
    const size_t first = std::find(pass.begin(), pass.end(), pass[at]) - pass.begin();
    Recording rec(flat, pass[at]);
    RecordingSink sink(rec, flat_grads);
    auto loss = fx.model->forward_backward(rec, sink, fx.inputs.data(), fx.targets.data(), fx.B, fx.T, 1.0f);
    EXPECT_EQ(loss.status(), absl::DataLossError("injected: " + pass[at]));
    EXPECT_EQ(rec.calls, std::vector<std::string>(pass.begin(), pass.begin() + first + 1));
  }
}

// Weights reach a table's operands in their own type or through fp32;
// two different 16-bit types are refused, naming both.
TEST(GptGradients, WeightsOfAnotherSixteenBitTypeThanTheOperandsAreRefused) {
  EXPECT_TRUE(check_weight_types(DType::kBF16, DType::kBF16).ok());
  EXPECT_TRUE(check_weight_types(DType::kBF16, DType::kF32).ok());
  EXPECT_TRUE(check_weight_types(DType::kF32, DType::kF16).ok());
  const absl::Status refused = check_weight_types(DType::kF16, DType::kBF16);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("fp16"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("bf16 operands"), std::string::npos) << refused;
}

}  // namespace
}  // namespace zerod
