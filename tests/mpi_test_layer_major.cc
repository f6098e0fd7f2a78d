// Layer-major accumulation (zero_optimization.accumulation "layer") against
// micro-batch-major training in the same world. For an untied Llama, each
// layer's gradients of a step are summed on the device in the order stage
// 0's micro-batch passes add them, so every step's loss and the final fp32
// master weights equal the micro-batch-major stage 0 run's bit for bit, at
// every stage, precision and optimizer (stage 1's, for 8-bit states,
// which are quantized by the shard), with the optimizer and the
// parameters offloaded to host memory and to NVMe. GPT-2's tied head adds
// its head parts before its embedding parts: its layer-major runs equal
// each other bit for bit, and the micro-batch-major run within a stated
// tolerance. No clipping: the update's factor is then exact whatever order
// the gradient norm is summed in (the norms are compared within 1e-12).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/crc32c.h"
#include "runtime/engine/trainer.h"
#include "tests/mpi_world.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::world;

nlohmann::json base_job(const std::string& preset) {
  return {
      {"model", {{"preset", preset}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 32}, {"seed", 5}}},
      {"run", {{"steps", 4}, {"seed", 17}, {"device", "cpu"}}},
      // 2 sequences per micro-batch: 6 / world micro-batches a step.
      {"train_batch_size", 12},
      {"train_micro_batch_size_per_gpu", 2},
      {"activation_checkpointing", {{"enabled", true}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
      {"zero_optimization", {{"reduce_bucket_size", 20000}, {"stage3_param_persistence_threshold", 0}}},
  };
}

// cfg's run in this world, its master weights' CRC-32C beside them.
struct Training {
  testing::TrainedRun run;
  uint32_t params_crc = 0;
};

Training train(const nlohmann::json& job, const std::vector<std::string>& overrides) {
  const JobConfig cfg = testing::config_with(job, overrides, world().world_size());
  Training t{testing::train_to_end(cfg, &world(), testing::test_device())};
  EXPECT_TRUE(t.run.status.ok()) << t.run.status;
  t.params_crc = crc32c(t.run.params.data(), t.run.params.size() * sizeof(float));
  return t;
}

const std::string kLayer = "zero_optimization.accumulation=\"layer\"";
std::string stage(int s) { return "zero_optimization.stage=" + std::to_string(s); }

struct Case {
  std::string name;
  // What the micro-batch-major reference shares. 8-bit states are
  // quantized in blocks of the rank's shard, so their reference is stage
  // 1's, whose micro-batches are summed in one buffer as stage 0's are.
  std::vector<std::string> numerics;
  std::vector<std::string> zero;  // the stage and offload of the layer-major run
};

std::vector<Case> cases(const std::string& dir) {
  const std::string bf16 = "bf16.enabled=true", fp16 = "fp16.enabled=true", w8 = "optimizer.type=AdamW8bit";
  const std::vector<std::string> opt_cpu = {"zero_optimization.offload_optimizer.device=\"cpu\""};
  const std::vector<std::string> opt_nvme = {"zero_optimization.offload_optimizer.device=\"nvme\"",
                                             "zero_optimization.offload_optimizer.nvme_path=\"" + dir + "\"",
                                             "zero_optimization.sub_group_size=10000", "aio.block_size=16384"};
  const std::vector<std::string> param_cpu = {"zero_optimization.offload_param.device=\"cpu\""};
  const std::vector<std::string> param_nvme = {
      "zero_optimization.offload_param.device=\"nvme\"", "zero_optimization.offload_param.nvme_path=\"" + dir + "\"",
      "zero_optimization.offload_param.buffer_count=2", "aio.block_size=16384"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  return {
      {"s0_fp32", {}, {stage(0)}},
      {"s1_bf16", {bf16}, {stage(1)}},
      {"s2_fp32_adamw8bit", {w8, stage(1)}, {stage(2)}},
      {"s2_bf16_opt_cpu", {bf16}, with({stage(2)}, opt_cpu)},
      {"s2_fp16", {fp16}, {stage(2)}},
      {"s3_fp32", {}, {stage(3)}},
      {"s3_bf16_param_cpu", {bf16}, with({stage(3)}, param_cpu)},
      {"s3_fp16_param_cpu_opt_cpu", {fp16}, with(with({stage(3)}, param_cpu), opt_cpu)},
      {"s3_fp32_adamw8bit_opt_nvme_param_nvme", {w8, stage(1)}, with(with({stage(3)}, opt_nvme), param_nvme)},
  };
}

void expect_norms_near(const Training& got, const Training& want) {
  const std::vector<double>&g = got.run.grad_norms, &w = want.run.grad_norms;
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-12 * w[i]) << "step " << i + 1;
}

TEST(LayerMajor, AnUntiedLlamaTrainsAsMicroBatchMajorStageZeroBitForBit) {
  const nlohmann::json job = base_job("llama-tiny");
  std::map<std::vector<std::string>, Training> reference;  // by numerics
  for (const Case& c : cases(::testing::TempDir())) {
    SCOPED_TRACE(::testing::Message() << c.name << ", world " << world().world_size());
    if (!reference.count(c.numerics)) reference[c.numerics] = train(job, c.numerics);
    const Training& want = reference[c.numerics];
    std::vector<std::string> layer = c.numerics;
    layer.insert(layer.end(), c.zero.begin(), c.zero.end());
    layer.push_back(kLayer);
    const Training got = train(job, layer);
    EXPECT_EQ(got.run.losses, want.run.losses);
    EXPECT_EQ(got.params_crc, want.params_crc);
    expect_norms_near(got, want);
  }
}

TEST(LayerMajor, GptTwosTiedHeadIsItsOwnOrderAtEveryStage) {
  const nlohmann::json job = base_job("gpt2-tiny");
  const Training layer0 = train(job, {stage(0), kLayer});
  for (const std::vector<std::string>& zero : {std::vector<std::string>{stage(1)},
                                               {stage(2), "zero_optimization.offload_optimizer.device=\"cpu\""},
                                               {stage(3), "zero_optimization.offload_param.device=\"cpu\""}}) {
    SCOPED_TRACE(::testing::Message() << zero[0] << ", world " << world().world_size());
    std::vector<std::string> layer = zero;
    layer.push_back(kLayer);
    const Training got = train(job, layer);
    EXPECT_EQ(got.run.losses, layer0.run.losses);
    EXPECT_EQ(got.params_crc, layer0.params_crc);
    expect_norms_near(got, layer0);
  }
  // Against the micro-batch passes: wte's sums in another order move the
  // weights by rounding, 4 steps of Adam at lr 3e-3 at most a few ulps of
  // an update each.
  const Training passes = train(job, {stage(0)});
  ASSERT_EQ(passes.run.params.size(), layer0.run.params.size());
  EXPECT_NE(passes.params_crc, layer0.params_crc);  // the orders do differ
  for (size_t i = 0; i < passes.run.params.size(); ++i) {
    ASSERT_NEAR(layer0.run.params[i], passes.run.params[i], 1e-5) << "parameter " << i;
  }
  for (size_t i = 0; i < passes.run.losses.size(); ++i) {
    EXPECT_NEAR(layer0.run.losses[i], passes.run.losses[i], 1e-6 * passes.run.losses[i]) << "step " << i + 1;
  }
}

// "layer" keeps each micro-batch's block inputs: without checkpointing it
// is refused, naming both keys, before anything is built.
TEST(LayerMajor, WithoutCheckpointingItIsRefused) {
  nlohmann::json job = base_job("llama-tiny");
  job["activation_checkpointing"]["enabled"] = false;
  job["zero_optimization"]["accumulation"] = "layer";
  const absl::StatusOr<JobConfig> cfg = parse_job_config(job, world().world_size());
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("zero_optimization.accumulation"), std::string::npos) << cfg.status();
  EXPECT_NE(cfg.status().message().find("activation_checkpointing.enabled"), std::string::npos) << cfg.status();
  job["activation_checkpointing"]["enabled"] = true;
  job["zero_optimization"]["accumulation"] = "layers";
  const absl::StatusOr<JobConfig> misspelt = parse_job_config(job, world().world_size());
  ASSERT_FALSE(misspelt.ok());
  EXPECT_NE(misspelt.status().message().find("micro_batch"), std::string::npos) << misspelt.status();
}

}  // namespace
}  // namespace zerod
