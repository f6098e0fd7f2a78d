// Training on instruction data (windowed shards with a loss mask): a step's
// loss and gradient are the mean over the targets the mask counts in the
// whole step, so cutting the step into micro-batches differently changes
// neither; and ids that no counted target sees (the padding after each
// example) change nothing at all.
#include <gtest/gtest.h>

#include "runtime/model/gpt.h"
#include "runtime/model/weights.h"
#include "tests/float_compare.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

constexpr int kSeq = 32, kExamples = 24;
constexpr double kLr = 1e-3;

class LossMask : public testing::TempDirTest {
 protected:
  std::string examples(const std::string& name, uint32_t pad) {
    testing::write_instruction_shard(path(name), kExamples, kSeq, pad);
    return path(name);
  }
  JobConfig job(const std::string& data, int micro, int accum, int steps = 3) {
    return testing::config_with({{"model", {{"preset", "llama-tiny"}}},
                                 {"data", {{"kind", "tokens"}, {"path", data}, {"seq_len", kSeq}}},
                                 {"run", {{"steps", steps}, {"seed", 3}, {"device", "cpu"}}},
                                 {"train_micro_batch_size_per_gpu", micro},
                                 {"gradient_accumulation_steps", accum},
                                 {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}}}}}},
                                {});
  }
};

// The first step's loss against the model's logits for the same windows,
// from the same parameters: the mean cross-entropy over the targets the
// mask counts, not over every position.
TEST_F(LossMask, TheLossIsTheMeanOverTheCountedTargets) {
  const JobConfig cfg = job(examples("sft.bin", 0), 4, 1, 1);
  auto t = testing::make_trainer(cfg);
  ASSERT_TRUE(t.ok()) << t.status();
  auto params = (*t)->master_params();
  ASSERT_TRUE(params.ok()) << params.status();

  auto ds = load_dataset(cfg.data, cfg.model.vocab_size);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto loader = DataLoader::create(&ds->tokens, kSeq, cfg.data.seed, 0, 1, MemoryAccountant::global(), true);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<int32_t> inputs(4 * kSeq), targets(4 * kSeq);
  const int64_t counted = loader->next_batch(4, inputs.data(), targets.data());

  testing::CpuRig rig;
  auto model = *Gpt::create(cfg.model, 4, kSeq, DType::kF32, false, rig.device, *rig.kernels);
  auto w = *FlatWeights::create(&model->layout(), DType::kF32, params->data(), rig.device, *rig.kernels);
  const int V = cfg.model.vocab_size;
  std::vector<float> logits(size_t(4) * kSeq * V);
  ASSERT_TRUE(model->forward_logits(w, inputs.data(), 4, kSeq, logits.data(), false).ok());
  std::vector<double> kept;
  std::vector<int32_t> kept_targets;
  for (int n = 0; n < 4 * kSeq; ++n) {
    if (targets[n] < 0) continue;
    kept.insert(kept.end(), logits.begin() + int64_t(n) * V, logits.begin() + int64_t(n + 1) * V);
    kept_targets.push_back(targets[n]);
  }
  ASSERT_EQ(int64_t(kept_targets.size()), counted);
  ASSERT_LT(counted, 4 * kSeq / 2);  // most positions are not targets
  auto step = (*t)->step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_NEAR(step->loss, testing::mean_cross_entropy(kept, kept_targets, V), 1e-5);
}

TEST_F(LossMask, AStepIsTheMeanOverItsCountedTargetsHoweverItIsCut) {
  const std::string data = examples("sft.bin", 0);
  const testing::TrainedRun whole = testing::train_to_end(job(data, 4, 1), nullptr, testing::test_device());
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  for (const auto& [micro, accum] : {std::pair{2, 2}, std::pair{1, 4}}) {
    SCOPED_TRACE(::testing::Message() << micro << " x " << accum);
    const testing::TrainedRun cut = testing::train_to_end(job(data, micro, accum), nullptr, testing::test_device());
    ASSERT_TRUE(cut.status.ok()) << cut.status;
    ASSERT_EQ(cut.losses.size(), whole.losses.size());
    // fp32 sums in another order: rounding in the losses; Adam moves a
    // parameter whose gradient is near zero by about lr either way
    // (mpi_test_zero.cc says more).
    for (size_t i = 0; i < whole.losses.size(); ++i)
      EXPECT_NEAR(cut.losses[i], whole.losses[i], 1e-5 * whole.losses[i]) << i;
    ASSERT_EQ(cut.params.size(), whole.params.size());
    double worst = 0;
    for (size_t i = 0; i < cut.params.size(); ++i)
      worst = std::max(worst, double(std::fabs(cut.params[i] - whole.params[i])));
    EXPECT_LE(worst, 2 * kLr);
  }
}

TEST_F(LossMask, IdsNoCountedTargetSeesChangeNothing) {
  const testing::TrainedRun a = testing::train_to_end(job(examples("a.bin", 0), 2, 2), nullptr, testing::test_device());
  const testing::TrainedRun b =
      testing::train_to_end(job(examples("b.bin", 77), 2, 2), nullptr, testing::test_device());
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_TRUE(testing::same_bits(a.params, b.params));
}

}  // namespace
}  // namespace zerod
