// Resuming a checkpoint at another world size or ZeRO stage, with
// zero-worker under mpirun: each rank reads its part of the saved shards.
// Master weights and fp32 states move exactly; the continued run follows the
// uninterrupted one within the ZeRO equivalence tolerances
// (mpi_test_zero.cc), since the ranks sum gradients in another order and
// 8-bit states are requantized in the new ranks' blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/engine/trainer.h"
#include "shard/saved_shards.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

#ifdef ZEROD_WITH_MPI

using testing::events;
using testing::of_kind;

// 20 steps of 24 sequences (2 per micro-batch, 12 / world accumulation
// steps), a checkpoint after step 10.
nlohmann::json job(const std::string& checkpoint_dir) {
  return {{"model", {{"preset", "gpt2-tiny"}}},
          {"data", {{"kind", "synthetic"}, {"seq_len", 32}, {"seed", 3}}},
          {"run",
           {{"steps", 20},
            {"seed", 11},
            {"log_format", "json"},
            {"checkpoint", {{"dir", checkpoint_dir}, {"interval", 10}, {"keep", 2}}}}},
          {"train_batch_size", 24},
          {"train_micro_batch_size_per_gpu", 2},
          {"steps_per_print", 1},
          {"gradient_clipping", 1.0},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
          {"zero_optimization", {{"stage", 0}, {"reduce_bucket_size", 20000}, {"stage3_param_persistence_threshold", 0}}}};
}

class ReshardTest : public testing::TempDirTest {
 protected:
  // Runs j with the "key=value" settings as np ranks; its step events.
  std::vector<nlohmann::json> train(int np, const nlohmann::json& j, const std::vector<std::string>& settings) {
    std::string args = "--config " + write("job-" + std::to_string(runs_++) + ".json", j.dump());
    for (const std::string& s : settings) args += " --set " + s;
    const testing::CommandResult r = testing::mpirun(np, args);
    EXPECT_EQ(r.code, 0) << r.out;
    return of_kind(events(r.out), "step");
  }

  // Saves at (np, stage), then resumes the step-10 checkpoint at each of
  // `resumed` ({np, stage}) with `resume_settings` added: steps 11-20 within
  // rtol of the saving run's.
  void expect_resumes_follow(int np, int stage, const std::vector<std::pair<int, int>>& resumed,
                             const std::vector<std::string>& settings, double rtol,
                             const std::vector<std::string>& resume_settings = {}) {
    const std::string root = path("ck-" + std::to_string(runs_));
    const std::vector<nlohmann::json> ref =
        train(np, job(root), with(settings, {"zero_optimization.stage=" + std::to_string(stage)}));
    ASSERT_EQ(ref.size(), 20u);
    for (const auto& [n, s] : resumed) {
      SCOPED_TRACE(::testing::Message() << "saved at world " << np << " stage " << stage << ", resumed at world "
                                        << n << " stage " << s);
      const std::vector<nlohmann::json> later =
          train(n, job(path("unused")),
                with(with(settings, resume_settings), {"zero_optimization.stage=" + std::to_string(s),
                                                       "run.resume=" + root + "/step-00000010"}));
      ASSERT_EQ(later.size(), 10u);
      for (int i = 0; i < 10; ++i) {
        ASSERT_EQ(later[i]["step"], 11 + i);
        const double want = ref[10 + i]["loss"].get<double>();
        EXPECT_NEAR(later[i]["loss"].get<double>(), want, rtol * want) << "step " << 11 + i;
      }
    }
  }

  static std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  int runs_ = 0;
};

TEST_F(ReshardTest, Fp32ResumesAtOtherWorldSizesAndStages) {
  // Losses to a relative 1e-5, as ZeroEquivalence.Fp32EveryStage... At
  // world 4 stage 3 (and world 2 stage 0 from a stage-0 save) the partition
  // is the saved one, and each rank reads a file whole.
  expect_resumes_follow(4, 2, {{2, 3}, {3, 1}, {1, 0}, {4, 3}}, {}, 1e-5);
  expect_resumes_follow(1, 0, {{4, 3}, {2, 0}}, {}, 1e-5);
}

TEST_F(ReshardTest, EightBitStatesResumeRequantizedAndStraightToTheirTier) {
  // ... and 1e-3 with 8-bit states, as ZeroEquivalence.EightBitStates...
  // The resumed runs keep their states (and stage 3's parameters) in files.
  const std::vector<std::string> eight_bit = {"optimizer.type=AdamW8bit"};
  const std::vector<std::string> nvme = {"zero_optimization.offload_optimizer.device=nvme",
                                         "zero_optimization.offload_optimizer.nvme_path=" + path(""),
                                         "zero_optimization.sub_group_size=10000"};
  expect_resumes_follow(4, 3, {{3, 2}}, eight_bit, 1e-3, nvme);
  expect_resumes_follow(4, 1, {{2, 3}}, eight_bit, 1e-3,
                        with(nvme, {"zero_optimization.offload_param.device=nvme",
                                    "zero_optimization.offload_param.nvme_path=" + path("")}));
}

// A world of one resumed from four ranks' shards holds exactly what they
// saved: saved again, its master weights, m and v are the four files'
// arrays put in flat order by a plain loop over the four partitions.
TEST_F(ReshardTest, AWorldOfOneHoldsFourRanksShardsExactly) {
  nlohmann::json j = job(path("four"));
  j["run"]["steps"] = 10;
  j["zero_optimization"]["stage"] = 3;
  ASSERT_EQ(train(4, j, {}).size(), 10u);

  j["zero_optimization"]["stage"] = 0;
  auto t = testing::make_trainer(testing::config_with(j, {}));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->resume(path("four/step-00000010")).ok());
  EXPECT_EQ((*t)->steps_done(), 10);
  ASSERT_TRUE((*t)->save_checkpoint(path("one"), 1).ok());

  const GptLayout& layout = (*t)->layout();
  const int64_t n = layout.num_params();
  std::vector<float> want[3] = {std::vector<float>(n, NAN), std::vector<float>(n, NAN), std::vector<float>(n, NAN)};
  const char* names[3] = {"master", "m", "v"};
  const Partition four(layout, 4);
  for (int r = 0; r < 4; ++r) {
    char file[64];
    std::snprintf(file, sizeof file, "four/step-00000010/rank-%05d.safetensors", r);
    auto reader = SafetensorsReader::open(path(file));
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (int a = 0; a < 3; ++a) {
      std::vector<float> saved(reader->find(names[a])->numel());
      ASSERT_TRUE(reader->read(*reader->find(names[a]), saved.data()).ok());
      int64_t at = 0;
      for (const ShardSegment& s : owned_segments(layout, four, r)) {
        for (int64_t i = 0; i < s.numel; ++i) want[a][s.flat_offset + i] = saved[at + i];
        at += s.numel;
      }
      EXPECT_EQ(at, static_cast<int64_t>(saved.size()));
    }
  }
  auto one = SafetensorsReader::open(path("one/step-00000010/rank-00000.safetensors"));
  ASSERT_TRUE(one.ok()) << one.status();
  for (int a = 0; a < 3; ++a) {
    SCOPED_TRACE(names[a]);
    std::vector<float> got(n);
    ASSERT_EQ(one->find(names[a])->numel(), n);
    ASSERT_TRUE(one->read(*one->find(names[a]), got.data()).ok());
    EXPECT_EQ(std::memcmp(got.data(), want[a].data(), n * 4), 0);
  }
}

// Reading saved 8-bit states dequantizes a few blocks at a time: any cut of
// the flat range into reads, at block edges or not, gives the bits of one
// read of the whole.
TEST_F(ReshardTest, EightBitStatesReadInAnyCutsAreTheWholeReadsBits) {
  nlohmann::json j = job(path("four"));
  j["run"]["steps"] = 10;
  j["optimizer"]["type"] = "AdamW8bit";
  j["zero_optimization"]["stage"] = 3;
  ASSERT_EQ(train(4, j, {}).size(), 10u);
  auto cfg = testing::config_with(j, {});
  const GptLayout layout(cfg.model);
  std::vector<std::string> files;
  for (int r = 0; r < 4; ++r) {
    char file[64];
    std::snprintf(file, sizeof file, "four/step-00000010/rank-%05d.safetensors", r);
    files.push_back(path(file));
  }
  SavedShards saved(layout, cfg.optimizer, files);
  const int64_t n = layout.num_params();
  std::vector<float> m(n), v(n), cut_m(n, NAN), cut_v(n, NAN);
  ASSERT_TRUE(saved.read(0, n, nullptr, m.data(), v.data()).ok());
  EXPECT_GT(std::count_if(v.begin(), v.end(), [](float x) { return x > 0; }), n / 2);
  const int64_t cuts[] = {1, 255, 257, 4095, 4097, 9000, 3, 70001};
  for (int64_t at = 0, i = 0; at < n; ++i) {
    const int64_t end = std::min(n, at + cuts[i % std::size(cuts)]);
    ASSERT_TRUE(saved.read(at, end, nullptr, cut_m.data() + at, cut_v.data() + at).ok());
    at = end;
  }
  EXPECT_EQ(std::memcmp(cut_m.data(), m.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(cut_v.data(), v.data(), n * 4), 0);
}

#endif  // ZEROD_WITH_MPI

}  // namespace
}  // namespace zerod
