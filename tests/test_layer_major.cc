// A step's micro-batches run layer by layer (Gpt::enqueue_layer_major)
// against the same micro-batches run one after another
// (enqueue_forward_backward), on the same weights into the same gradient
// buffer: the same losses and, tensor by tensor, the same sums in the same
// order, bit for bit, but for a tied head's, whose parts are added in
// another order; each layer asked for once going up and once coming down;
// the first failure of a source or sink stopping the step; a model's plan
// its allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/model/gpt.h"
#include "tests/float_compare.h"
#include "tests/recording_weights.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::bits;
using testing::Recording;
using testing::RecordingSink;

constexpr int kB = 2, kT = 8, kMicro = 3;

uint64_t peak(const MemoryPlan& p, Category c) { return p.peaks().peak[int(Tier::kHost)][int(c)]; }

// A document in each row's second half: positions 0..3, 0..3.
std::vector<int32_t> packed_positions() {
  std::vector<int32_t> pos;
  for (int b = 0; b < kB; ++b) {
    for (int t = 0; t < kT; ++t) pos.push_back(t % (kT / 2));
  }
  return pos;
}

struct Step {
  GptConfig cfg;
  DType act;
  bool packed;
  testing::CpuRig rig;
  std::vector<float> params;
  std::vector<std::vector<int32_t>> inputs, targets;
  std::vector<int32_t> positions = packed_positions();

  Step(GptConfig c, DType a, bool p) : cfg(c), act(a), packed(p) {
    const GptLayout layout(cfg);
    params.resize(layout.num_params());
    init_gpt_params(layout, 7, params.data());
    NormalRng rng(3);
    for (float& x : params) x += static_cast<float>(0.1 * rng.next());
    for (int j = 0; j < kMicro; ++j) {
      inputs.emplace_back();
      targets.emplace_back();
      for (int i = 0; i < kB * kT; ++i) {
        inputs[j].push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
        targets[j].push_back(static_cast<int32_t>(rng.next_u64() % cfg.vocab_size));
      }
    }
  }

  std::unique_ptr<Gpt> model(bool layer_major) {
    auto m = Gpt::create(cfg, kB, kT, act, /*checkpointing=*/true, rig.device, *rig.kernels, false, nullptr, kMicro,
                         packed, layer_major);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::vector<Gpt::MicroBatch> batches() const {
    std::vector<Gpt::MicroBatch> b;
    for (int j = 0; j < kMicro; ++j) {
      b.push_back({inputs[j].data(), targets[j].data(), packed ? positions.data() : nullptr, 0});
    }
    return b;
  }

  // The step's gradients (scaled by 0.75) and each micro-batch's loss.
  struct Result {
    std::vector<float> grads;
    std::vector<double> losses;
  };
  Result run(bool layer_major) {
    std::unique_ptr<Gpt> m = model(layer_major);
    Result r{std::vector<float>(params.size(), 0.0f), {}};
    auto w = *FlatWeights::create(&m->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
    FlatGrads sink(&m->layout(), r.grads.data());
    const std::vector<Gpt::MicroBatch> b = batches();
    if (layer_major) {
      EXPECT_TRUE(m->enqueue_layer_major(w, sink, b, kB, kT, 0.75f).ok());
    } else {
      for (int j = 0; j < kMicro; ++j) {
        EXPECT_TRUE(
            m->enqueue_forward_backward(w, sink, b[j].inputs, b[j].targets, kB, kT, 0.75f, 0, j, b[j].positions).ok());
      }
    }
    EXPECT_TRUE(rig.device.synchronize(rig.device.compute_stream()).ok());
    for (int j = 0; j < kMicro; ++j) r.losses.push_back(m->pass_loss(j));
    return r;
  }
};

struct Case {
  const char* name;
  GptConfig cfg;
  DType act;
  bool packed;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class LayerMajorOf : public ::testing::TestWithParam<Case> {};

TEST_P(LayerMajorOf, IsTheMicroBatchPassesSumsBitForBit) {
  Step step(GetParam().cfg, GetParam().act, GetParam().packed);
  const Step::Result passes = step.run(false), layers = step.run(true);
  EXPECT_EQ(layers.losses, passes.losses);
  const GptLayout layout(step.cfg);
  // A tied head's gradient: the head's three parts, then the embeddings'
  // (the passes: head, embeddings, head, ...). Reordering fp32 sums of
  // this size moves them by ulps of the largest.
  const int64_t tied = step.cfg.tie_embeddings || !step.cfg.llama() ? layout.tensor(kWte).numel : 0;
  const int64_t wte = layout.offset(kWte, 0);
  float largest = 0;
  for (int64_t i = wte; i < wte + tied; ++i) largest = std::max(largest, std::fabs(passes.grads[i]));
  for (size_t i = 0; i < passes.grads.size(); ++i) {
    const bool in_tied = int64_t(i) >= wte && int64_t(i) < wte + tied;
    if (in_tied) {
      ASSERT_NEAR(layers.grads[i], passes.grads[i], 4e-7f * largest) << "wte element " << i - wte;
    } else {
      ASSERT_EQ(bits(std::vector{layers.grads[i]}), bits(std::vector{passes.grads[i]})) << "element " << i;
    }
  }
  // Every micro-batch counted: the gradients are not one micro-batch's.
  float moved = 0;
  for (float g : layers.grads) moved = std::max(moved, std::fabs(g));
  EXPECT_GT(moved, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerMajorOf,
                         ::testing::Values(Case{"Llama", testing::small_llama(false), DType::kF32, false},
                                           Case{"LlamaBf16Packed", testing::small_llama(false), DType::kBF16, true},
                                           Case{"QwenLikeTied", testing::small_llama(true), DType::kF32, false},
                                           Case{"Gpt2Packed", GptConfig{2, 2, 16, 32, 8}, DType::kF32, true},
                                           Case{"Gpt2Bf16", GptConfig{2, 2, 16, 32, 8}, DType::kBF16, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// Each layer once going up and once coming down, each gradient layer once;
// and the step stops at the first call that fails, asking nothing more.
TEST(LayerMajor, AsksForEachLayerOnceAStepAndStopsAtTheFirstFailure) {
  Step step(testing::small_llama(false), DType::kF32, false);
  std::unique_ptr<Gpt> m = step.model(true);
  std::vector<float> grads(step.params.size(), 0.0f);
  auto flat = *FlatWeights::create(&m->layout(), DType::kF32, step.params.data(), step.rig.device, *step.rig.kernels);
  FlatGrads flat_grads(&m->layout(), grads.data());
  Recording all(flat, "");
  RecordingSink all_sink(all, flat_grads);
  ASSERT_TRUE(m->enqueue_layer_major(all, all_sink, step.batches(), kB, kT, 1.0f).ok());
  const std::vector<std::string> step_calls = {
      "globals",      "layer 0",      "prefetch 1 1",      "layer 1",           "prefetch 1 0",
      "grad globals", "layer 1",      "prefetch 0 -1",     "grad layer 1",      "grad layer_done 1",
      "layer 0",      "grad layer 0", "grad layer_done 0", "grad end_backward", "end_pass"};
  ASSERT_EQ(all.calls, step_calls);
  for (size_t at = 0; at < step_calls.size(); ++at) {
    SCOPED_TRACE(step_calls[at]);
    const size_t first = std::find(step_calls.begin(), step_calls.end(), step_calls[at]) - step_calls.begin();
    Recording rec(flat, step_calls[at]);
    RecordingSink sink(rec, flat_grads);
    EXPECT_EQ(m->enqueue_layer_major(rec, sink, step.batches(), kB, kT, 1.0f),
              absl::DataLossError("injected: " + step_calls[at]));
    EXPECT_EQ(rec.calls, std::vector<std::string>(step_calls.begin(), step_calls.begin() + first + 1));
  }
}

TEST(LayerMajor, RefusesAModelOrStepItDoesNotFit) {
  Step step(testing::small_llama(false), DType::kF32, false);
  auto no_checkpoints = Gpt::create(step.cfg, kB, kT, DType::kF32, /*checkpointing=*/false, step.rig.device,
                                    *step.rig.kernels, false, nullptr, kMicro, false, /*layer_major=*/true);
  EXPECT_EQ(no_checkpoints.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_checkpoints.status().message().find("needs checkpointing"), std::string::npos);

  std::vector<float> grads(step.params.size(), 0.0f);
  std::unique_ptr<Gpt> passes = step.model(false), layers = step.model(true);
  auto w = *FlatWeights::create(&passes->layout(), DType::kF32, step.params.data(), step.rig.device, *step.rig.kernels);
  FlatGrads sink(&passes->layout(), grads.data());
  EXPECT_EQ(passes->enqueue_layer_major(w, sink, step.batches(), kB, kT, 1.0f).code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<Gpt::MicroBatch> four = step.batches();
  four.push_back(four[0]);
  const absl::Status too_many = layers->enqueue_layer_major(w, sink, four, kB, kT, 1.0f);
  EXPECT_EQ(too_many, absl::InvalidArgumentError("a layer-major step of 4 micro-batches on a model made for 3"));
  EXPECT_EQ(layers->enqueue_layer_major(w, sink, {}, kB, kT, 1.0f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layers->enqueue_layer_major(w, sink, step.batches(), kB, kT + 1, 1.0f).code(),
            absl::StatusCode::kInvalidArgument);
  // Positions on a model not made for packed sequences.
  std::vector<Gpt::MicroBatch> with_positions = step.batches();
  with_positions[2].positions = step.positions.data();
  EXPECT_EQ(layers->enqueue_layer_major(w, sink, with_positions, kB, kT, 1.0f).code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing was added by a refused step.
  EXPECT_TRUE(std::all_of(grads.begin(), grads.end(), [](float g) { return g == 0.0f; }));
}

// What a layer-major model allocates is its plan's, category by category:
// each micro-batch's block inputs, residual gradient and tokens.
TEST(LayerMajor, ItsPlanIsItsAllocation) {
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed);
    Step step(GptConfig{2, 2, 16, 32, 8}, DType::kBF16, packed);
    MemoryAccountant& acc = MemoryAccountant::global();
    const uint64_t acts = acc.current(Tier::kHost, Category::kActivations);
    const uint64_t work = acc.current(Tier::kHost, Category::kWorkspace);
    std::unique_ptr<Gpt> m = step.model(true);
    MemoryPlan plan({Tier::kHost});
    Gpt::plan(step.cfg, kB, kT, DType::kBF16, true, false, step.rig.kernels->memory(), plan, nullptr, kMicro, packed,
              true);
    EXPECT_EQ(acc.current(Tier::kHost, Category::kActivations) - acts, peak(plan, Category::kActivations));
    EXPECT_EQ(acc.current(Tier::kHost, Category::kWorkspace) - work, peak(plan, Category::kWorkspace));
    MemoryPlan one({Tier::kHost});
    Gpt::plan(step.cfg, kB, kT, DType::kBF16, true, false, step.rig.kernels->memory(), one, nullptr, kMicro, packed);
    // The block inputs of two more micro-batches: 3 layers' inputs of B T C
    // bf16 each.
    EXPECT_EQ(peak(plan, Category::kActivations) - peak(one, Category::kActivations),
              uint64_t{2} * 3 * kB * kT * 16 * 2);
  }
}

}  // namespace
}  // namespace zerod
