// Several ranks training on GPUs they share, with the CPU device standing
// in for the GPU (CpuDeviceOptions gpu_tier: memory only copies reach,
// threaded streams with random delays). GPU buffers go over MPI through
// host staging (comm/staged_communicator.h), which moves exactly the bytes
// the collectives would: every stage, with and without offload, gives
// bitwise the run of the plain CPU device over MPI, and each rank's GPU
// holds its share of the optimizer states and gradients.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/staged_communicator.h"
#include "runtime/core/caching_allocator.h"
#include "runtime/core/cpu_device.h"
#include "runtime/engine/trainer.h"
#include "tests/mpi_world.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::world;

nlohmann::json job(int stage) {
  return {
      {"model", {{"preset", "gpt2-tiny"}, {"n_layer", 3}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 32}, {"seed", 3}}},
      {"run", {{"steps", 4}, {"seed", 11}, {"device", "cpu"}}},
      {"train_batch_size", 12},
      {"train_micro_batch_size_per_gpu", 2},
      {"bf16", {{"enabled", true}}},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.1}}}}},
      {"zero_optimization",
       {{"stage", stage}, {"reduce_bucket_size", 20000}, {"stage3_param_persistence_threshold", 0}}},
  };
}

CpuDeviceOptions gpu_tier() {
  CpuDeviceOptions o;
  o.threaded = true;
  o.gpu_tier = true;
  o.seed = 1 + world().rank();
  return o;
}

TEST(GpuTierRanks, StagedExchangeGivesTheBitsOfTheCpuRunOverMpi) {
  const int n = world().world_size();
  const std::vector<std::vector<std::string>> offloads = {
      {}, {"zero_optimization.offload_optimizer.device=\"cpu\""}, {"zero_optimization.offload_param.device=\"cpu\""}};
  for (int stage = 0; stage <= 3; ++stage) {
    for (const auto& o : offloads) {
      if (!o.empty() && o[0].find("offload_param") != std::string::npos && stage != 3) continue;
      SCOPED_TRACE(::testing::Message() << "stage " << stage << (o.empty() ? "" : ", " + o[0]) << ", world " << n);
      const JobConfig cfg = testing::config_with(job(stage), o, n);
      MemoryAccountant cpu_acct;
      CpuDevice cpu(cpu_acct);
      const testing::TrainedRun want = testing::train_to_end(cfg, &world(), cpu);
      ASSERT_TRUE(want.status.ok()) << want.status;
      MemoryAccountant acct;
      CpuDevice gpu(acct, gpu_tier());
      std::unique_ptr<Communicator> staged = make_staged_communicator(world(), gpu);
      const testing::TrainedRun got = testing::train_to_end(cfg, staged.get(), gpu);
      ASSERT_TRUE(got.status.ok()) << got.status;
      // The GPU's buffers went through host staging.
      EXPECT_GT(acct.peak(Tier::kHost, Category::kComm), 0u);
      ASSERT_EQ(got.losses.size(), want.losses.size());
      EXPECT_EQ(got.losses, want.losses);
      EXPECT_TRUE(testing::same_bits(got.params, want.params));
    }
  }
}

// Stage 2 keeps 1/world of the optimizer states (fp32 masters, m and v)
// and of the fp32 gradient shard on each rank's GPU; blocks of the caching
// allocator round each buffer up by less than 2 MiB.
TEST(GpuTierRanks, EachRanksGpuHoldsItsShareOfStatesAndGradients) {
  const int n = world().world_size();
  const JobConfig cfg = testing::config_with(job(2), {"model.n_embd=128"}, n);
  const int64_t params = GptLayout(cfg.model).num_params();
  MemoryAccountant acct;
  CpuDevice gpu(acct, gpu_tier());
  std::unique_ptr<Communicator> staged = make_staged_communicator(world(), gpu);
  const absl::Status trained = testing::train_to_end(cfg, staged.get(), gpu).status;
  ASSERT_TRUE(trained.ok()) << trained;
  const uint64_t slack = CachingAllocator::block_size(2u << 20) * 2;
  EXPECT_LE(acct.peak(Tier::kGpu, Category::kOptimizer), uint64_t(12 * params / n) + slack);
  EXPECT_GE(acct.peak(Tier::kGpu, Category::kOptimizer), uint64_t(12 * params / n));
  EXPECT_LE(acct.peak(Tier::kGpu, Category::kGrads), uint64_t(4 * params / n) + slack);
  EXPECT_GE(acct.peak(Tier::kGpu, Category::kGrads), uint64_t(4 * params / n));
}

}  // namespace
}  // namespace zerod
