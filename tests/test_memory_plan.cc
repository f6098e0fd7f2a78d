// The memory plan's arithmetic, its model-state figures against the ZeRO
// paper's, and `zeroctl estimate` from outside: its refusals, and its
// figures against a real zero-worker run's memory table.
// (mpi_test_memory_plan.cc checks every buffer against the accountant.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/caching_allocator.h"
#include "runtime/core/cpu_device.h"
#include "runtime/engine/estimate.h"
#include "runtime/engine/trainer.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

constexpr int kHost = static_cast<int>(Tier::kHost), kGpu = static_cast<int>(Tier::kGpu);

uint64_t at(const MemoryPeaks& p, Tier t, Category c) { return p.peak[static_cast<int>(t)][static_cast<int>(c)]; }

TEST(MemoryPlanTest, PeaksAreTheLargestPhaseWithWhatEarlierPhasesKept) {
  MemoryPlan plan;
  plan.add("always", Tier::kHost, Category::kParams, 100);
  plan.add("kept from the checkpoint on", Tier::kHost, Category::kWorkspace, 30, Phase::kCheckpoint, true);
  plan.add("only while resuming", Tier::kHost, Category::kWorkspace, 50, Phase::kResume, false);
  plan.add("only while evaluating", Tier::kHost, Category::kWorkspace, 10, Phase::kEvaluation, false, 2);
  plan.add_nvme("file", Category::kOptimizer, 7);
  EXPECT_EQ(plan.held(Phase::kBuild).total[kHost], 100u);
  EXPECT_EQ(plan.held(Phase::kResume).total[kHost], 150u);
  EXPECT_EQ(plan.held(Phase::kTraining).total[kHost], 130u);
  EXPECT_EQ(plan.held(Phase::kEvaluation).total[kHost], 150u);
  const MemoryPeaks p = plan.peaks();
  EXPECT_EQ(p.total[kHost], 150u);
  EXPECT_EQ(at(p, Tier::kHost, Category::kWorkspace), 50u);
  EXPECT_EQ(at(p, Tier::kHost, Category::kParams), 100u);
  EXPECT_EQ(at(p, Tier::kNvme, Category::kOptimizer), 7u);
}

TEST(MemoryPlanTest, GpuBuffersAreCountedAtTheAllocatorsBlockSize) {
  MemoryPlan plan({Tier::kGpu, /*pins=*/true, /*caches_blocks=*/true});
  plan.add_device("small", Category::kWorkspace, 100, Phase::kBuild, true, 3);
  plan.add_device("large", Category::kParams, (uint64_t{3} << 20) + 1);
  plan.add("pinned, not rounded", Tier::kPinned, Category::kOffload, 100);
  const MemoryPeaks p = plan.peaks();
  EXPECT_EQ(at(p, Tier::kGpu, Category::kWorkspace), 3 * 512u);
  EXPECT_EQ(at(p, Tier::kGpu, Category::kParams), uint64_t{4} << 20);
  EXPECT_EQ(at(p, Tier::kPinned, Category::kOffload), 100u);
  EXPECT_EQ(CachingAllocator::block_size(100), 512u);
}

// The ZeRO paper (Rajbhandari et al. 2020, figure 1) counts mixed-precision
// Adam's model states per GPU as 16Ψ (stage 0), 4Ψ + 12Ψ/N (1), 2Ψ + 14Ψ/N
// (2) and 16Ψ/N (3): 2Ψ of 16-bit parameters, 2Ψ of 16-bit gradients and
// 12Ψ of fp32 masters, m and v. This engine accumulates gradients in fp32,
// 4Ψ where the paper has 2Ψ (and keeps them whole at stage 1 as well as
// their reduced shard); and pads each unit to N equal chunks of a multiple
// of 64 elements, Ψp in all, which ranks past the parameters hold as
// padding. Rank 0 holds no padding, so its masters and states are Ψp/N.
TEST(MemoryPlanTest, ModelStatesOfGpt2XlAreTheZeroPapersWithFp32Gradients) {
  const JobConfig base = testing::config_with({{"model", {{"preset", "gpt2-xl"}}},
                                               {"data", {{"kind", "synthetic"}, {"seq_len", 64}}},
                                               {"run", {{"device", "cuda"}}},
                                               {"train_micro_batch_size_per_gpu", 1},
                                               {"bf16", {{"enabled", true}}},
                                               {"optimizer", {{"type", "AdamW"}}}},
                                              {});
  const GptLayout layout(base.model);
  const double psi = static_cast<double>(layout.num_params());
  ASSERT_GT(psi, 1.5e9);
  for (int n : {1, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << ", N " << n);
      JobConfig cfg = base;
      cfg.zero.stage = stage;
      MemoryPlan plan({Tier::kGpu, true, false});
      ASSERT_TRUE(Trainer::plan(cfg, n, /*rank=*/0, {KernelBackend::kCuda}, plan).ok());
      const MemoryPeaks p = plan.peaks();
      const double padded = static_cast<double>(Partition(layout, stage == 0 ? 1 : n).padded_numel());
      const double shard = padded / (stage == 0 ? 1 : n);
      const double params = at(p, Tier::kGpu, Category::kParams);
      const double grads = at(p, Tier::kGpu, Category::kGrads);
      const double optimizer = at(p, Tier::kGpu, Category::kOptimizer);
      // This engine's figures, from the paper's terms.
      const double params16 = stage == 3 ? 2 * shard : 2 * padded;
      const double grads32 = stage <= 1 ? 4 * padded + (stage == 1 ? 4 * shard : 0) : 4 * shard;
      EXPECT_EQ(optimizer, 12 * shard);
      EXPECT_EQ(grads, grads32);
      // Stage 3 also holds the gathered units (the embeddings, the final
      // LayerNorm and two layers), all that the paper's 16Ψ/N leaves out.
      const double gathered =
          stage == 3 ? 2 * (layout.unit_numel(0) + layout.unit_numel(layout.final_unit()) + 2 * layout.unit_numel(1))
                     : 0;
      EXPECT_NEAR(params, params16 + gathered, 2.0 * 64 * n * layout.num_units());
      // And against the paper itself: the fp32 gradients' extra 2Ψ (or
      // 2Ψ/N), padding and the gathered units are the whole difference.
      const double paper[] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n};
      const double extra_grads = stage == 0 ? 2 * psi : stage == 1 ? 2 * psi + 4 * psi / n : 2 * psi / n;
      EXPECT_NEAR(params + grads + optimizer, paper[stage] + extra_grads + gathered, 20.0 * 64 * n * layout.num_units())
          << "paper " << paper[stage] / psi << " psi";
    }
  }
}

// The GPU tier's plan, on the CPU device standing in for a GPU (its memory
// the gpu tier, through the caching allocator, reached only by copies):
// every tier and category of a run equals the plan's, byte for byte.
class GpuTierPlanTest : public testing::TempDirTest {};

TEST_F(GpuTierPlanTest, EqualsTheAccountantsPeaksOfAStandInGpuRun) {
  const std::string nvme = "zero_optimization.offload_optimizer.nvme_path=\"" + dir_.string() + "\"";
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"bf16.enabled=true", "activation_checkpointing.enabled=true", "activation_checkpointing.cpu_checkpointing=true"},
      {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\"", "bf16.enabled=true"},
      {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=\"nvme\"", nvme,
       "zero_optimization.offload_param.device=\"cpu\"", "optimizer.type=\"AdamW8bit\""},
      {"zero_optimization.stage=3", "bf16.enabled=true", "run.checkpoint.async=false"}};
  for (const std::vector<std::string>& overrides : cases) {
    SCOPED_TRACE(::testing::Message() << ::testing::PrintToString(overrides));
    nlohmann::json j = testing::tiny_job();
    j["run"]["steps"] = 2;
    j["run"]["checkpoint"] = {{"dir", path("ckpt")}};
    const JobConfig cfg = testing::config_with(j, overrides);
    MemoryAccountant acct;
    CpuDeviceOptions options;
    options.gpu_tier = true;
    CpuDevice device(acct, options);
    MemoryPlan plan(plan_device(device));
    ASSERT_TRUE(Trainer::plan(cfg, 1, 0, kernel_memory_for(device), plan).ok());
    {
      auto t = Trainer::create(cfg, nullptr, &device);
      ASSERT_TRUE(t.ok()) << t.status();
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE((*t)->step().ok());
        if (i == 0) ASSERT_TRUE((*t)->start_checkpoint(path("ckpt"), 1, cfg.run.checkpoint.async).ok());
      }
      ASSERT_TRUE((*t)->finish_checkpoint(true).ok());
      ASSERT_TRUE((*t)->synthetic_accuracy().ok());
    }
    const MemoryPeaks want = plan.peaks(), got = acct.peaks();
    EXPECT_GT(got.total[kGpu], 0u);
    for (int t = 0; t < kNumTiers; ++t) {
      EXPECT_EQ(want.total[t], got.total[t]) << tier_name(static_cast<Tier>(t));
      for (int c = 0; c < kNumCategories; ++c) {
        EXPECT_EQ(want.peak[t][c], got.peak[t][c])
            << tier_name(static_cast<Tier>(t)) << " " << category_name(static_cast<Category>(c));
      }
    }
  }
}

class EstimateTest : public testing::TempDirTest {
 protected:
  struct Result {
    int code;
    std::string out, err;
  };
  Result estimate(std::vector<std::string> args) {
    args.insert(args.begin(), "estimate");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    std::ostringstream out, err;
    const int code = run_estimate(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
  }
  std::string job(nlohmann::json j = testing::tiny_job()) { return write("job.json", j.dump()); }
};

TEST_F(EstimateTest, RefusesImpossibleMachinesNamingTheFlag) {
  const std::string cfg = job();
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--ranks", "0"}, "--ranks must be at least 1, got 0"},
      {{"--ranks", "-2"}, "--ranks must be at least 1, got -2"},
      {{"--nodes", "0"}, "--nodes must be at least 1"},
      {{"--ranks", "3", "--nodes", "2"}, "--ranks 3 cannot be spread evenly over --nodes 2"},
      {{"--gpus-per-node", "0", "--device", "cuda"}, "--gpus-per-node must be at least 1"},
      {{"--ranks", "4", "--gpus-per-node", "8", "--device", "cuda"}, "--ranks 4 is not --nodes 1 x --gpus-per-node 8"},
      {{"--host-memory", "12 parsecs"}, "--host-memory: '12 parsecs' is not a byte size"},
      {{"--host-memory", "-1GiB"}, "--host-memory: '-1GiB' is not a byte size"},
      {{"--nvme", "0"}, "--nvme must be more than 0 bytes"},
      {{"--gpu-memory", "12GiB", "--device", "cpu"}, "describe GPUs, but the job trains on the CPU"},
  };
  for (const auto& [args, message] : bad) {
    std::vector<std::string> a = {"--config", cfg};
    a.insert(a.end(), args.begin(), args.end());
    const Result r = estimate(a);
    EXPECT_EQ(r.code, 2) << message;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << message;
  }
  const Result unknown = estimate({"--config", cfg, "--gpus", "4"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("--gpus"), std::string::npos) << unknown.err;
}

TEST_F(EstimateTest, RefusesABadConfigWithZeroWorkersMessage) {
  nlohmann::json j = testing::tiny_job();
  j["zero_optimization"] = {{"stage", 5}};
  j["no_such_key"] = 1;
  const std::string cfg = job(j);
  const Result e = estimate({"--config", cfg});
  const testing::WorkerResult w = testing::run_worker_with({"--config", cfg});
  EXPECT_EQ(e.code, 2);
  EXPECT_EQ(w.code, 2);
  const std::string prefix = "zero-worker: error: ";
  ASSERT_EQ(w.err.rfind(prefix, 0), 0u) << w.err;
  EXPECT_EQ(e.err, "zeroctl estimate: error: " + w.err.substr(prefix.size()));
  EXPECT_NE(e.err.find("no_such_key"), std::string::npos) << e.err;
  const Result missing = estimate({"--config", path("none.json")});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("none.json"), std::string::npos) << missing.err;
}

// From outside: the estimate of a job equals the memory table of the run
// zero-worker then makes of it, every tier and category.
TEST_F(EstimateTest, EqualsTheMemoryTableOfTheRun) {
  nlohmann::json j = testing::tiny_job();
  j["run"]["steps"] = 2;
  j["run"]["checkpoint"] = {{"dir", path("ckpt")}, {"interval", 1}};
  j["zero_optimization"] = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}};
  j["bf16"] = {{"enabled", true}};
  const std::string cfg = job(j);
  const Result e = estimate({"--config", cfg, "--json", "--host-memory", "1GiB"});
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json got = nlohmann::json::parse(e.out);
  EXPECT_EQ(got["fits"], true);
  EXPECT_EQ(got["world_size"], 1);
  const testing::WorkerResult w = testing::run_worker_with({"--config", cfg, "--log-format", "json"});
  ASSERT_EQ(w.code, 0) << w.err;
  const auto summary = testing::of_kind(testing::events(w.out), "summary");
  ASSERT_EQ(summary.size(), 1u);
  const nlohmann::json& ran = summary[0]["memory_peak"];
  // The summary shows the plan beside the peaks, and the resident peak
  // holds at least what the accountant counted.
  EXPECT_EQ(summary[0]["memory_planned"], ran);
  uint64_t host = 0;
  for (const auto& [category, bytes] : ran["host"].items()) host += bytes.get<uint64_t>();
  EXPECT_GT(summary[0]["resident_peak"].get<uint64_t>(), host);
  for (const auto& [tier, categories] : ran.items()) {
    for (const auto& [category, bytes] : categories.items()) {
      EXPECT_EQ(got["per_rank"][tier][category], bytes) << tier << " " << category;
    }
  }
  EXPECT_GT(got["per_rank"]["host"]["total"].get<uint64_t>(),
            4 * uint64_t(gpt_param_count(testing::config_with(j, {}).model)));
  // Too little memory is said, with the shortfall.
  const Result small = estimate({"--config", cfg, "--host-memory", "1MiB"});
  ASSERT_EQ(small.code, 0) << small.err;
  EXPECT_NE(small.out.find("host memory per node 1.0 MiB: needs"), std::string::npos) << small.out;
  EXPECT_NE(small.out.find("does not fit"), std::string::npos) << small.out;
}

// The techniques table: each row is the job with that technique added to
// the ones above; the first is the plain job's own estimate.
TEST_F(EstimateTest, TechniquesAddOneAfterAnother) {
  const std::string cfg = job();
  const Result plain = estimate({"--config", cfg, "--json", "--ranks", "4"});
  const Result t = estimate({"--config", cfg, "--json", "--ranks", "4", "--techniques"});
  ASSERT_EQ(t.code, 0) << t.err;
  const nlohmann::json rows = nlohmann::json::parse(t.out)["techniques"];
  ASSERT_EQ(rows.size(), 9u);
  EXPECT_EQ(rows[0]["technique"], "plain fp32, AdamW");
  EXPECT_EQ(rows[0]["per_rank"], nlohmann::json::parse(plain.out)["per_rank"]);
  auto host = [&](int row, const char* category) { return rows[row]["per_rank"]["host"][category].get<uint64_t>(); };
  EXPECT_LT(host(2, "optimizer"), host(1, "optimizer"));      // 8-bit m and v
  EXPECT_LT(host(3, "activations"), host(2, "activations"));  // checkpointing
  EXPECT_LT(3 * host(6, "optimizer"), host(3, "optimizer"));  // ZeRO 3 at 4 ranks: about a quarter
  EXPECT_EQ(host(8, "optimizer"), 0u);                        // states in the file
  EXPECT_GT(rows[8]["per_rank"]["nvme"]["total"].get<uint64_t>(), 0u);
  const Result text = estimate({"--config", cfg, "--techniques"});
  EXPECT_NE(text.out.find("+ optimizer and parameters on NVMe"), std::string::npos) << text.out;
}

// Ranks of a node add up; GPU jobs are planned for GPUs on any machine.
TEST_F(EstimateTest, NodesSumTheirRanksAndGpusAreDescribedWithoutOne) {
  nlohmann::json j = testing::tiny_job();
  j["zero_optimization"] = {{"stage", 3}};
  j["run"]["device"] = "auto";
  const std::string cfg = job(j);
  const Result e = estimate({"--config", cfg, "--json", "--nodes", "2", "--gpus-per-node", "4", "--gpu-memory", "80GiB",
                             "--host-memory", "64GiB"});
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json r = nlohmann::json::parse(e.out);
  EXPECT_EQ(r["device"], "cuda");
  EXPECT_EQ(r["world_size"], 8);
  EXPECT_EQ(r["ranks_per_node"], 4);
  const uint64_t rank_gpu = r["per_rank"]["gpu"]["total"], node_gpu = r["per_node"]["gpu"]["total"];
  EXPECT_GT(rank_gpu, 0u);
  EXPECT_LE(node_gpu, 4 * rank_gpu);
  // Ranks differ by their padding at most: under 64 x 8 elements a unit (of
  // 4), without Adam's m and v.
  EXPECT_GE(node_gpu, 4 * rank_gpu - 4 * (64 * 8 * 4 * 8));
  // The CUDA table's own buffers are in it.
  EXPECT_GE(r["per_rank"]["gpu"]["workspace"].get<uint64_t>(), KernelMemory::kCudaBlasWorkspace);
  ASSERT_EQ(r["capacity"].size(), 2u);
  EXPECT_EQ(r["capacity"][0]["needed"], rank_gpu);
}

}  // namespace
}  // namespace zerod
