// Several ranks training on GPUs they share, with the CPU device standing
// in for the GPU (CpuDeviceOptions gpu_tier: memory only copies reach,
// threaded streams with random delays). GPU buffers go over MPI through
// host staging (comm/staged_communicator.h), which moves exactly the bytes
// the collectives would: every stage, with and without offload, gives
// bitwise the run of the plain CPU device over MPI, and each rank's GPU
// holds its share of the optimizer states and gradients. The communicator
// a worker picks (comm/bootstrap.h) stages for ranks that share a GPU,
// routes device buffers to the device's communicator, and is NCCL where
// every rank has a GPU of its own. Where the machine has a GPU, ranks
// sharing it train against the one-rank run on it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/mpi_communicator.h"
#include "comm/routed_communicator.h"
#include "comm/staged_communicator.h"
#include "runtime/core/caching_allocator.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/gpu_memory.h"
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
  // Without clipping, stages 2 and 3 update each unit during backward, on
  // the GPU or the host, its states in memory or streamed from a file (on
  // the host); with clipping too under super_offload (states in memory or
  // a file), undone where it clips; offloaded parameters are written by the
  // host thread or copied back from the GPU. The reference runs without
  // the optimizer's offload.
  const std::string super = "zero_optimization.offload_optimizer.super_offload=true";
  const std::string compute = "zero_optimization.micro_batch_grads=\"compute\"";
  const std::vector<std::vector<std::string>> offloads = {
      {},
      {"zero_optimization.offload_optimizer.device=\"cpu\""},
      {"zero_optimization.offload_param.device=\"cpu\""},
      {"zero_optimization.offload_param.device=\"cpu\"", "zero_optimization.offload_optimizer.device=\"cpu\"",
       "gradient_clipping=0"},
      {"zero_optimization.offload_optimizer.device=\"cpu\"", "gradient_clipping=0"},
      // Every micro-batch to the host in bf16: the units' updates shared
      // between the host and the GPU, the parameters in its memory or the
      // host's.
      {"zero_optimization.offload_optimizer.device=\"cpu\"", "gradient_clipping=0", compute},
      {"zero_optimization.offload_param.device=\"cpu\"", "zero_optimization.offload_optimizer.device=\"cpu\"",
       "gradient_clipping=0", compute},
      {"zero_optimization.offload_optimizer.device=\"cpu\"", super},
      {"zero_optimization.offload_optimizer.device=\"nvme\"", "gradient_clipping=0",
       "zero_optimization.offload_optimizer.nvme_path=\"" + ::testing::TempDir() + "\"",
       "zero_optimization.sub_group_size=10000"},
      {"zero_optimization.offload_optimizer.device=\"nvme\"", super,
       "zero_optimization.offload_optimizer.nvme_path=\"" + ::testing::TempDir() + "\"",
       "zero_optimization.sub_group_size=10000"}};
  for (int stage = 0; stage <= 3; ++stage) {
    for (const auto& o : offloads) {
      if (!o.empty() && o[0].find("offload_param") != std::string::npos && stage != 3) continue;
      if (o.size() > 1 && stage < 2) continue;
      std::string name;
      for (const std::string& k : o) name += ", " + k;
      SCOPED_TRACE(::testing::Message() << "stage " << stage << name << ", world " << n);
      const JobConfig cfg = testing::config_with(job(stage), o, n);
      std::vector<std::string> plain = o;
      std::erase_if(plain, [](const std::string& k) {
        return k.starts_with("zero_optimization.offload_optimizer") || k.starts_with("zero_optimization.sub_group");
      });
      MemoryAccountant cpu_acct;
      CpuDevice cpu(cpu_acct);
      const testing::TrainedRun want = testing::train_to_end(testing::config_with(job(stage), plain, n), &world(), cpu);
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

constexpr std::chrono::seconds kTimeout(120);

// Rank r's n floats r + 1 + i/8 in the device's memory.
absl::StatusOr<Buffer> ranks_values(Device& d, int64_t n) {
  ZEROD_ASSIGN_OR_RETURN(Buffer b, d.allocate(n * 4, Category::kWorkspace));
  const int r = world().rank();
  ZEROD_RETURN_IF_ERROR(d.write_from_host(d.compute_stream(), b.data(), n * 4,
                                          host_elements<float>([&](float* p, int64_t start, int64_t k) {
                                            for (int64_t i = 0; i < k; ++i) p[i] = r + 1 + (start + i) / 8.0f;
                                            return absl::OkStatus();
                                          })));
  return b;
}

// The sum over ranks of ranks_values, element by element, read back and
// compared exactly (small integers and eighths add exactly in fp32).
void expect_summed(Device& d, const Buffer& b, int64_t n) {
  const int w = world().world_size();
  std::vector<float> got(n);
  ASSERT_TRUE(d.read_on_host(d.compute_stream(), b.data(), n * 4, host_elements<float>([&](float* p, int64_t start,
                                                                                           int64_t k) {
                 std::memcpy(got.data() + start, p, k * 4);
                 return absl::OkStatus();
               })).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], w * (w + 1) / 2.0f + w * (i / 8.0f)) << i;
}

// Ranks that share a GPU (every local rank 0 here, and the stand-in is no
// CUDA device) get MPI through staging from make_device_communicator: a
// device buffer's all-reduce is staged through host memory and sums.
TEST(DeviceCommunicator, RanksSharingAGpuExchangeThroughStaging) {
  auto mpi = make_mpi_communicator(kTimeout);
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  MemoryAccountant acct;
  CpuDevice gpu(acct, gpu_tier());
  const RankInfo rank{world().rank(), world().world_size(), 0};
  auto comm = make_device_communicator(*std::move(mpi), rank, gpu, kTimeout);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_STREQ((*comm)->backend(), "mpi");
  auto b = ranks_values(gpu, 1000);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(all_reduce(**comm, b->data(), 1000, CommType::kF32, ReduceOp::kSum).ok());
  expect_summed(gpu, *b, 1000);
  EXPECT_GE(acct.peak(Tier::kHost, Category::kComm), 4000u);
}

// A routed communicator sends a collective on device buffers to the
// device's communicator (here MPI through staging, which allocates host
// staging) and one on host buffers to the host's (plain MPI, no staging).
TEST(DeviceCommunicator, RoutesDeviceBuffersToTheDevicesCommunicator) {
  auto a = make_mpi_communicator(kTimeout);
  auto h = make_mpi_communicator(kTimeout);
  ASSERT_TRUE(a.ok() && h.ok());
  MemoryAccountant acct;
  CpuDevice gpu(acct, gpu_tier());
  std::unique_ptr<Communicator> routed =
      make_routed_communicator(make_staged_communicator(*std::move(a), gpu), *std::move(h), gpu);
  const int w = world().world_size();
  std::vector<double> host(5, world().rank() + 1.0);
  ASSERT_TRUE(all_reduce(*routed, host.data(), 5, CommType::kF64, ReduceOp::kSum).ok());
  for (double x : host) EXPECT_EQ(x, w * (w + 1) / 2.0);
  EXPECT_EQ(acct.peak(Tier::kHost, Category::kComm), 0u) << "host buffers are not staged";
  auto b = ranks_values(gpu, 64);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(all_reduce(*routed, b->data(), 64, CommType::kF32, ReduceOp::kSum).ok());
  expect_summed(gpu, *b, 64);
  EXPECT_GE(acct.peak(Tier::kHost, Category::kComm), 256u);
  EXPECT_TRUE(routed->barrier()->wait().ok());
}

// Ranks with a GPU each exchange device buffers over NCCL; a rank late to
// a collective is named by the others when the timeout passes, as over MPI.
TEST(DeviceCommunicator, GpusOfTheirOwnUseNcclAndNameALateRank) {
  const int w = world().world_size();
  if (cuda_device_count() < w) {
    GTEST_SKIP() << "needs a CUDA GPU per rank: " << cuda_device_count() << " visible for " << w << " ranks";
  }
  auto device = open_device("cuda", world().rank());
  ASSERT_TRUE(device.ok()) << device.status();
  auto mpi = make_mpi_communicator(kTimeout);
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  const RankInfo rank{world().rank(), w, world().rank()};
  auto comm = make_device_communicator(*std::move(mpi), rank, **device, std::chrono::milliseconds(1000));
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_STREQ((*comm)->backend(), "nccl") << "this build has no NCCL";
  auto b = ranks_values(**device, 1000);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(all_reduce(**comm, b->data(), 1000, CommType::kF32, ReduceOp::kSum).ok());
  expect_summed(**device, *b, 1000);
  if (world().rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const absl::Status s = all_reduce(**comm, b->data(), 1000, CommType::kF32, ReduceOp::kSum);
  if (world().rank() != 1) {
    ASSERT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find("all_reduce #2"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 1 (last reached #1)"), std::string::npos) << s;
  }
  comm->reset();
  EXPECT_TRUE(world().barrier()->wait().ok());
}

// On a real GPU, where the machine has one: every rank opens GPU 0, so
// ranks past the first share it and exchange through pinned staging over
// MPI. Stages 1-3 follow the one-rank run of the same global batch on the
// same GPU within what the CPU's ZeRO tests allow mixed precision
// (mpi_test_zero.cc: losses to 1e-2 relative, parameters to 10 lr), and
// each rank's GPU holds its share of the optimizer states, as on the CPU.
TEST(GpuRanks, RanksSharingTheGpuFollowTheOneRankRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports none";
  const int n = world().world_size();
  constexpr double kLr = 3e-3;
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n);
    MemoryAccountant one_acct;
    auto one = open_device("cuda", 0, one_acct);
    ASSERT_TRUE(one.ok()) << one.status();
    const testing::TrainedRun want =
        testing::train_to_end(testing::config_with(job(stage), {"model.n_embd=128"}, 1), nullptr, **one);
    ASSERT_TRUE(want.status.ok()) << want.status;
    one->reset();  // the one-rank run's device closes before the ranks open theirs

    MemoryAccountant acct;
    auto gpu = open_device("cuda", 0, acct);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    auto mpi = make_mpi_communicator(kTimeout);
    ASSERT_TRUE(mpi.ok()) << mpi.status();
    auto comm = make_device_communicator(*std::move(mpi), RankInfo{world().rank(), n, world().rank()}, **gpu, kTimeout);
    ASSERT_TRUE(comm.ok()) << comm.status();
    if (n > 1) {
      EXPECT_STREQ((*comm)->backend(), "mpi") << "ranks sharing a GPU stage through host memory";
    }
    const JobConfig cfg = testing::config_with(job(stage), {"model.n_embd=128"}, n);
    const testing::TrainedRun got = testing::train_to_end(cfg, comm->get(), **gpu);
    ASSERT_TRUE(got.status.ok()) << got.status;
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t i = 0; i < want.losses.size(); ++i) {
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-2 * want.losses[i]) << "step " << i + 1;
    }
    ASSERT_EQ(got.params.size(), want.params.size());
    for (size_t i = 0; i < want.params.size(); ++i) ASSERT_NEAR(got.params[i], want.params[i], 10 * kLr) << i;
    const int64_t params = GptLayout(cfg.model).num_params();
    const uint64_t slack = CachingAllocator::block_size(2u << 20) * 2;
    EXPECT_LE(acct.peak(Tier::kGpu, Category::kOptimizer), uint64_t(12 * params / n) + slack);
    EXPECT_GE(acct.peak(Tier::kGpu, Category::kOptimizer), uint64_t(12 * params / n));
  }
}

}  // namespace
}  // namespace zerod
