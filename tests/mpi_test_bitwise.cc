// Training is bitwise what it was when the fixtures were recorded: for a
// matrix of ZeRO stages, precisions, optimizers, offload tiers and
// activation checkpointing, at world sizes 1 to 3, every step's loss and
// gradient norm and the final fp32 master weights (CRC-32C of their bytes)
// equal tests/fixtures/bitwise_np<N>.json.
//
// The fixtures hold the training of the engine, recorded again when the
// build stopped fusing a*b+c on its own (-ffp-contract=off, CMakeLists.txt:
// GCC fused where it vectorised, so AVX-512 and AVX2 machines differed);
// refactors of the engine must not move a bit.
// ctest runs this with one OpenMP thread and OpenBLAS's Haswell kernels, so
// the numbers do not depend on the machine's core count or instruction set.
//
// To record (only when a change is meant to alter the numerics, and said so
// in its commit): ZEROD_BITWISE_RECORD=1 ctest -R mpi_test_bitwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "runtime/core/crc32c.h"
#include "runtime/engine/trainer.h"
#include "tests/mpi_world.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::world;

nlohmann::json base_job() {
  return {
      {"model", {{"preset", "gpt2-tiny"}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 32}, {"seed", 5}}},
      {"run", {{"steps", 6}, {"seed", 17}, {"device", "cpu"}}},
      // 2 sequences per micro-batch: 6 / world accumulation steps.
      {"train_batch_size", 12},
      {"train_micro_batch_size_per_gpu", 2},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
      {"zero_optimization", {{"reduce_bucket_size", 20000}, {"stage3_param_persistence_threshold", 0}}},
  };
}

struct Case {
  std::string name;
  std::vector<std::string> overrides;
};

std::vector<Case> cases(const std::string& dir) {
  const std::string bf16 = "bf16.enabled=true", fp16 = "fp16.enabled=true", w8 = "optimizer.type=AdamW8bit";
  const std::string ckpt = "activation_checkpointing.enabled=true";
  auto stage = [](int s) { return "zero_optimization.stage=" + std::to_string(s); };
  auto opt_on = [&](const std::string& device) {
    return std::vector<std::string>{"zero_optimization.offload_optimizer.device=\"" + device + "\"",
                                    "zero_optimization.offload_optimizer.nvme_path=\"" + dir + "\"",
                                    "zero_optimization.offload_optimizer.buffer_count=3",
                                    "zero_optimization.sub_group_size=10000", "aio.block_size=16384"};
  };
  auto param_on = [&](const std::string& device) {
    return std::vector<std::string>{"zero_optimization.offload_param.device=\"" + device + "\"",
                                    "zero_optimization.offload_param.nvme_path=\"" + dir + "\"",
                                    "zero_optimization.offload_param.buffer_count=2", "aio.block_size=16384"};
  };
  auto join = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  return {
      {"s0_fp32_adamw", {stage(0)}},
      {"s0_bf16_adamw8bit", {stage(0), bf16, w8}},
      {"s0_fp16_adam", {stage(0), fp16, "optimizer.type=Adam", "optimizer.params.adam_w_mode=false"}},
      {"s1_bf16_adamw", {stage(1), bf16}},
      {"s1_fp16_adamw8bit", {stage(1), fp16, w8}},
      {"s1_fp32_adamw_ckpt", {stage(1), ckpt}},
      {"s2_fp16_adamw", {stage(2), fp16}},
      {"s2_fp32_adamw8bit_ckpt", {stage(2), w8, ckpt}},
      {"s2_bf16_adamw_no_overlap", {stage(2), bf16, "zero_optimization.overlap_comm=false"}},
      {"s3_fp32_adamw8bit", {stage(3), w8}},
      {"s3_bf16_adamw_ckpt_no_prefetch", {stage(3), bf16, ckpt, "zero_optimization.stage3_prefetch_bucket_size=0"}},
      {"s3_fp16_adamw_persistent", {stage(3), fp16, "zero_optimization.stage3_param_persistence_threshold=1000000"}},
      {"s1_fp32_adamw_opt_cpu", join({stage(1)}, opt_on("cpu"))},
      {"s2_bf16_adamw8bit_opt_cpu", join({stage(2), bf16, w8}, opt_on("cpu"))},
      {"s3_fp16_adamw_opt_cpu", join({stage(3), fp16}, opt_on("cpu"))},
      {"s1_bf16_adamw_opt_nvme", join({stage(1), bf16}, opt_on("nvme"))},
      {"s2_fp32_adamw8bit_opt_nvme", join({stage(2), w8}, opt_on("nvme"))},
      {"s3_fp32_adamw_param_cpu", join({stage(3)}, param_on("cpu"))},
      {"s3_bf16_adamw_param_nvme_ckpt", join({stage(3), bf16, ckpt}, param_on("nvme"))},
      {"s3_fp16_adamw8bit_opt_nvme_param_nvme", join(join({stage(3), fp16, w8}, opt_on("nvme")), param_on("nvme"))},
  };
}

// Doubles as C99 hexadecimal literals: exact, and readable in a diff.
std::string hex(double x) { return absl::StrFormat("%a", x); }

// The run as the fixture records it.
nlohmann::json train(const JobConfig& cfg) {
  nlohmann::json out = {{"losses", nlohmann::json::array()}, {"grad_norms", nlohmann::json::array()}};
  auto t = testing::make_trainer(cfg, &world());
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return out;
  for (int64_t i = 0; i < cfg.run.steps; ++i) {
    auto s = (*t)->step();
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return out;
    out["losses"].push_back(hex(s->loss));
    out["grad_norms"].push_back(hex(s->grad_norm));
  }
  auto p = (*t)->master_params();
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) {
    out["params"] = {{"count", p->size()}, {"crc32c", crc32c(p->data(), p->size() * sizeof(float))}};
  }
  return out;
}

std::string fixture_path() {
  return absl::StrFormat("%s/tests/fixtures/bitwise_np%d.json", ZEROD_SOURCE_DIR, world().world_size());
}

TEST(Bitwise, TrainingEqualsTheRecordedFixture) {
  const int n = world().world_size();
  const bool record = std::getenv("ZEROD_BITWISE_RECORD") != nullptr;
  nlohmann::json want;
  if (!record) {
    std::ifstream in(fixture_path());
    ASSERT_TRUE(in.good()) << "no fixture " << fixture_path();
    want = nlohmann::json::parse(in);
  }
  nlohmann::json got = nlohmann::json::object();
  for (const Case& c : cases(::testing::TempDir())) {
    SCOPED_TRACE(::testing::Message() << c.name << ", world " << n);
    got[c.name] = train(testing::config_with(base_job(), c.overrides, n));
    if (record) continue;
    ASSERT_TRUE(want.contains(c.name)) << "the fixture has no case " << c.name;
    EXPECT_EQ(got[c.name]["losses"], want[c.name]["losses"]);
    EXPECT_EQ(got[c.name]["grad_norms"], want[c.name]["grad_norms"]);
    EXPECT_EQ(got[c.name]["params"], want[c.name]["params"]);
  }
  if (record && world().rank() == 0) {
    std::ofstream(fixture_path()) << got.dump(1) << "\n";
    std::printf("recorded %s\n", fixture_path().c_str());
  }
  // Every rank reads the fixture next: none before rank 0 has written it.
  int64_t done = 1;
  ASSERT_TRUE(all_reduce(world(), &done, 1, CommType::kI64, ReduceOp::kSum).ok());
}

// The fixture is not trivially met: a run one bit of data away differs.
TEST(Bitwise, ADifferentRunDoesNotMatchTheFixture) {
  std::ifstream in(fixture_path());
  ASSERT_TRUE(in.good()) << "no fixture " << fixture_path();
  const nlohmann::json want = nlohmann::json::parse(in);
  const nlohmann::json got =
      train(testing::config_with(base_job(), {"zero_optimization.stage=0", "data.seed=6"}, world().world_size()));
  EXPECT_NE(got["losses"], want["s0_fp32_adamw"]["losses"]);
  EXPECT_NE(got["params"], want["s0_fp32_adamw"]["params"]);
}

}  // namespace
}  // namespace zerod
