// The memory plan against the accountant, on every rank of an mpirun world:
// each job of a matrix (ZeRO stages 0-3; the optimizer in memory, on the
// host or on NVMe; parameters offloaded; activation checkpointing; fp32,
// bf16 and fp16; AdamW and AdamW8bit; micro-batches summed on the device or
// sent in 16 bits; gpt2-tiny and a 95M-parameter model; packed instruction
// data)
// trains, saves a checkpoint in the background and evaluates, as
// zero-worker does; the peak of every (tier, category) and of every tier
// that the accountant measured equals Trainer::plan's for that rank,
// byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/engine/trainer.h"
#include "tests/mpi_world.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::world;

struct Case {
  std::string name;
  std::vector<std::string> overrides;
  bool evaluate = true;  // the end-of-run evaluation (slow on the large model)
};

// This rank's packed data file in `dir`.
std::string packed_path(const std::string& dir) {
  return absl::StrCat(dir, "/zerod_memory_plan_packed_", getpid(), ".bin");
}

std::vector<Case> cases(const std::string& dir) {
  const char* offloads[] = {"none", "cpu", "nvme"};
  std::vector<Case> all;
  for (int stage = 0; stage <= 3; ++stage) {
    for (int o = 0; o < 3; ++o) {
      // Stage 0 keeps the optimizer on the device (updates during backward
      // need stage 2 or 3, and offload without them is stage 1's).
      if (stage == 0 && o > 0) continue;
      // Two of the eight (checkpointing, bf16, 8-bit) combinations per
      // (stage, offload), complementary and rotating, so that each
      // combination meets several stages and offloads.
      const int first = (stage * 3 + o) % 8;
      for (int bits : {first, 7 - first}) {
        Case c{absl::StrCat("stage", stage, "_", offloads[o], bits & 1 ? "_ckpt" : "", bits & 2 ? "_bf16" : "",
                            bits & 4 ? "_8bit" : "")};
        c.overrides = {absl::StrCat("zero_optimization.stage=", stage),
                       absl::StrCat("zero_optimization.offload_optimizer.device=\"", offloads[o], "\""),
                       absl::StrCat("zero_optimization.offload_optimizer.nvme_path=\"", dir, "\""),
                       "zero_optimization.sub_group_size=20000",
                       absl::StrCat("activation_checkpointing.enabled=", bits & 1 ? "true" : "false"),
                       absl::StrCat("bf16.enabled=", bits & 2 ? "true" : "false"),
                       absl::StrCat("optimizer.type=\"", bits & 4 ? "AdamW8bit" : "AdamW", "\"")};
        all.push_back(std::move(c));
      }
    }
  }
  const std::vector<std::string> stage3 = {"zero_optimization.stage=3",
                                           "zero_optimization.offload_optimizer.device=\"cpu\"",
                                           "zero_optimization.offload_param.nvme_path=\"" + dir + "\""};
  all.push_back({"stage3_params_cpu", testing::joined(stage3, {"zero_optimization.offload_param.device=\"cpu\""})});
  all.push_back({"stage3_params_nvme_bf16",
                 testing::joined(stage3, {"zero_optimization.offload_param.device=\"nvme\"", "bf16.enabled=true"})});
  // LoRA over an NF4 base: packed layers sharded, gathered from a file.
  all.push_back(
      {"stage3_lora_nf4_params_nvme", testing::joined(stage3, {R"(model.lora={"r": 4, "base_quant": "nf4"})",
                                                               "zero_optimization.offload_param.device=\"nvme\""})});
  // Persistent layers, no prefetch, one reduce-scatter slot.
  all.push_back({"stage3_persistent_no_overlap",
                 {"zero_optimization.stage=3", "zero_optimization.stage3_param_persistence_threshold=1000000000",
                  "zero_optimization.stage3_prefetch_bucket_size=0", "zero_optimization.overlap_comm=false"}});
  // Updates during backward that can be undone (clipping is on).
  all.push_back({"stage2_cpu_super_offload",
                 {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\"",
                  "zero_optimization.offload_optimizer.super_offload=true"}});
  all.push_back({"stage1_fp16", {"zero_optimization.stage=1", "fp16.enabled=true"}});
  // A Llama: its rotary table and SwiGLU buffers.
  all.push_back(
      {"llama_stage3_bf16_params_cpu", testing::joined(stage3, {"model.preset=llama-tiny", "bf16.enabled=true",
                                                                "zero_optimization.offload_param.device=\"cpu\""})});
  all.push_back({"llama_stage1_checkpointing",
                 {"model.preset=llama-tiny", "zero_optimization.stage=1", "activation_checkpointing.enabled=true"}});
  // Two micro-batches a step: their sum kept on the device ("auto" without
  // a limit), or each sent in 16 bits (the rounded copy on the device,
  // widened as it is added on the host).
  all.push_back({"stage2_cpu_accumulation_summed_on_device",
                 {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\"",
                  "gradient_accumulation_steps=2"}});
  all.push_back({"stage3_nvme_bf16_accumulation_compute",
                 {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=\"nvme\"",
                  "zero_optimization.offload_optimizer.nvme_path=\"" + dir + "\"", "bf16.enabled=true",
                  "zero_optimization.micro_batch_grads=\"compute\"", "gradient_accumulation_steps=2"}});
  // About 95M parameters (gpt2's width, 8 layers): the sizes scale with
  // the model, not only the tiny one's.
  const std::vector<std::string> large = {
      "model.preset=\"custom\"", "model.n_layer=8",     "model.n_head=12", "model.n_embd=768",
      "model.vocab_size=50257",  "model.block_size=64", "data.seq_len=16", "train_micro_batch_size_per_gpu=1"};
  all.push_back({"large_stage0", large, false});
  all.push_back(
      {"large_stage3_nvme_bf16_ckpt_8bit",
       testing::joined(large,
                       {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=\"nvme\"",
                        "zero_optimization.offload_optimizer.nvme_path=\"" + dir + "\"",
                        "activation_checkpointing.enabled=true", "bf16.enabled=true", "optimizer.type=\"AdamW8bit\""}),
       false});
  // Packed instruction data: the model's positions and the host's (and
  // GPT-2's positions' order), a file of this rank's own.
  const std::string packed = packed_path(dir);
  testing::write_packed_instruction_shard(packed, 24, 16);
  const std::vector<std::string> packed_data = {"data.kind=\"tokens\"", absl::StrCat("data.path=\"", packed, "\"")};
  all.push_back({"packed_stage2_ckpt",
                 testing::joined(packed_data, {"zero_optimization.stage=2", "activation_checkpointing.enabled=true"}),
                 false});
  all.push_back(
      {"llama_packed_stage3_bf16",
       testing::joined(packed_data, {"model.preset=llama-tiny", "zero_optimization.stage=3", "bf16.enabled=true"}),
       false});
  // A held-out set: a fraction of the training windows (their list), and a
  // packed shard beside unpacked training data (the model then packed).
  all.push_back({"held_out_fraction_stage3", {"data.eval={\"fraction\": 0.25}", "zero_optimization.stage=3"}, false});
  all.push_back(
      {"packed_held_out_set_stage1",
       {absl::StrCat("data.eval={\"path\": \"", packed, "\", \"kind\": \"tokens\"}"), "zero_optimization.stage=1"},
       false});
  // Sequences of 4096: attention takes its query rows in blocks.
  all.push_back(
      {"long_sequences_bf16",
       {"model.preset=\"custom\"", "model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.vocab_size=256",
        "model.block_size=4096", "data.seq_len=4096", "train_micro_batch_size_per_gpu=1", "bf16.enabled=true"},
       false});
  return all;
}

nlohmann::json base_job(const std::string& checkpoints) {
  nlohmann::json j = testing::tiny_job();
  j["data"]["seq_len"] = 16;
  j["train_micro_batch_size_per_gpu"] = 2;
  j["run"]["steps"] = 2;
  j["run"]["checkpoint"] = {{"dir", checkpoints}, {"keep", 1}};
  return j;
}

// The accountant's peaks over a run as zero-worker makes it: two steps, a
// checkpoint in the background, the evaluations.
MemoryPeaks measured(const JobConfig& cfg, bool evaluate) {
  MemoryAccountant& acct = testing::test_device().accountant();
  for (int t = 0; t < kNumTiers; ++t) EXPECT_EQ(acct.current_total(static_cast<Tier>(t)), 0u) << "left over";
  acct.reset_peaks();
  {
    auto t = testing::make_trainer(cfg, &world());
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    for (int64_t i = 0; i < cfg.run.steps; ++i) {
      auto s = (*t)->step();
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok()) return {};
      if (i == 0) EXPECT_TRUE((*t)->start_checkpoint(*cfg.run.checkpoint.dir, 1, /*background=*/true).ok());
    }
    EXPECT_TRUE((*t)->finish_checkpoint(/*wait=*/true).ok());
    if (evaluate) EXPECT_TRUE((*t)->synthetic_accuracy().ok());
    if (cfg.data.eval) EXPECT_TRUE((*t)->evaluate().ok());
  }
  return acct.peaks();
}

TEST(MemoryPlan, EqualsTheAccountantsPeaksOnEveryRank) {
  const int n = world().world_size(), rank = world().rank();
  const std::string dir = ::testing::TempDir();
  const std::string checkpoints = absl::StrCat(dir, "/zerod_memory_plan_np", n);
  if (rank == 0) std::filesystem::remove_all(checkpoints);
  ASSERT_TRUE(world().barrier()->wait().ok());
  auto kernels = kernels_for(testing::test_device());
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  for (const Case& c : cases(dir)) {
    SCOPED_TRACE(::testing::Message() << c.name << ", rank " << rank << " of " << n);
    const JobConfig cfg = testing::config_with(base_job(checkpoints), c.overrides, n);
    MemoryPlan plan(plan_device(testing::test_device()));
    ASSERT_TRUE(Trainer::plan(cfg, n, rank, (*kernels)->memory(), plan).ok());
    const MemoryPeaks want = plan.peaks();
    const MemoryPeaks got = measured(cfg, c.evaluate);
    for (int t = 0; t < kNumTiers; ++t) {
      const char* tier = tier_name(static_cast<Tier>(t));
      EXPECT_EQ(want.total[t], got.total[t]) << tier;
      for (int k = 0; k < kNumCategories; ++k) {
        EXPECT_EQ(want.peak[t][k], got.peak[t][k]) << tier << " " << category_name(static_cast<Category>(k));
      }
    }
    // Not trivially met: the job holds memory, and the model's share is in it.
    EXPECT_GT(got.total[static_cast<int>(Tier::kHost)], 4 * uint64_t(gpt_param_count(cfg.model)) / n);
  }
  if (rank == 0) std::filesystem::remove_all(checkpoints);
  std::filesystem::remove(packed_path(dir));
}

}  // namespace
}  // namespace zerod
