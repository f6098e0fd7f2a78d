// The memory plan's arithmetic, its model-state figures against the ZeRO
// paper's, and `zeroctl estimate` from outside: its refusals, and its
// figures against a real zero-worker run's memory table.
// (mpi_test_memory_plan.cc checks every buffer against the accountant.)
#include <gtest/gtest.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/core/caching_allocator.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/pinned_host.h"
#include "runtime/core/whole_file.h"
#include "runtime/engine/estimate.h"
#include "runtime/engine/fit.h"
#include "runtime/engine/memory_check.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/nf4_weights.h"
#include "shard/partition.h"
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
  plan.add(BufferSpec{"file", Category::kOptimizer, 7, 1, Tier::kNvme});
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
  plan.add(BufferSpec{"small", Category::kWorkspace, 100, 3});  // in the device's memory
  plan.add(BufferSpec{"large", Category::kParams, (uint64_t{3} << 20) + 1});
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

// QLoRA's case: gpt2-large with adapters of rank 8 on c_attn beside a base
// in NF4. The trained state is the adapters' (under 1% of full fine-tuning's
// gradients and optimizer states); the base's four matrices a layer take
// half a byte a weight, one absmax code a block of 64 and an fp32 absmax a
// group of 256 blocks (0.5 + 1/64 + 1/4096 bytes); bitsandbytes quantizes
// linear layers only: the biases and LayerNorms stay fp32, the embeddings
// are bf16 operands (the GPU table's, no fp32 copy).
TEST(MemoryPlanTest, QloraOfGpt2LargeIsAFractionOfFullFineTuning) {
  const nlohmann::json job = {{"model", {{"preset", "gpt2-large"}}}, {"data", {{"kind", "synthetic"}, {"seq_len", 64}}},
                              {"run", {{"device", "cuda"}}},         {"train_micro_batch_size_per_gpu", 1},
                              {"bf16", {{"enabled", true}}},         {"optimizer", {{"type", "AdamW"}}}};
  const JobConfig full = testing::config_with(job, {});
  const JobConfig qlora = testing::config_with(job, {R"(model.lora={"r": 8, "base_quant": "nf4"})"});
  const auto states = [](const JobConfig& cfg) {
    MemoryPlan plan({Tier::kGpu, true, false});
    EXPECT_TRUE(Trainer::plan(cfg, 1, 0, {KernelBackend::kCuda}, plan).ok());
    return plan.peaks();
  };
  const MemoryPeaks f = states(full), q = states(qlora);
  const auto trained = [](const MemoryPeaks& p) {
    return at(p, Tier::kGpu, Category::kGrads) + at(p, Tier::kGpu, Category::kOptimizer);
  };
  const GptLayout model(full.model), adapters = GptLayout::adapters(full.model, qlora.lora->adapters);
  EXPECT_EQ(adapters.num_params(), 36 * 8 * (1280 + 3 * 1280));
  // fp32 gradients, masters, m and v of the (padded) adapters.
  EXPECT_EQ(trained(q), 16 * uint64_t(Partition(adapters, 1).padded_numel()));
  EXPECT_LT(trained(q), trained(f) / 100) << trained(q) << " of " << trained(f);
  EXPECT_EQ(at(q, Tier::kGpu, Category::kParams), 2 * uint64_t(Partition(adapters, 1).padded_numel()));
  EXPECT_EQ(at(f, Tier::kGpu, Category::kFrozen), 0u);

  int64_t matrix_weights = 0, fp32_weights = 0, globals = 0;
  for (const ParamSegment& s : model.segments()) {
    (std::ranges::count(kLoraProductWeights, s.id) ? matrix_weights
     : model.tensor(s.id).per_layer                ? fp32_weights
                                                   : globals) += s.numel;
  }
  EXPECT_EQ(globals, model.unit_numel(0) + model.unit_numel(model.final_unit()));
  const double frozen = static_cast<double>(at(q, Tier::kGpu, Category::kFrozen));
  const double nf4 = frozen - 4.0 * fp32_weights - 2.0 * globals;
  // A byte's half a weight, a code a block, an fp32 absmax a group, and each
  // of a layer's four linear layers' map (256 fp32 values).
  EXPECT_NEAR(nf4 / matrix_weights, 0.5 + 1.0 / 64 + 1.0 / 4096 + 4.0 * 36 * 1024 / matrix_weights, 1e-4);
  // 0.645 bytes a parameter overall: 0.52 for the 92% in matrices, 2 for
  // the embeddings; against bf16's 2.
  EXPECT_NEAR(frozen / model.num_params(), 0.645, 0.01);
  EXPECT_EQ(at(f, Tier::kGpu, Category::kParams), 2 * uint64_t(Partition(model, 1).padded_numel()));
  EXPECT_EQ(frozen, static_cast<double>(Nf4Packing(model).model_bytes(DType::kBF16)));
  // Nothing else of the base is on the GPU but the layer unpacked as
  // operands: no fp32 or staged copy of the embeddings or of a layer.
  MemoryPlan plan({Tier::kGpu, true, false});
  ASSERT_TRUE(Trainer::plan(qlora, 1, 0, {KernelBackend::kCuda}, plan).ok());
  std::vector<std::string> on_gpu;
  for (const PlannedBuffer& b : plan.buffers()) {
    if (b.from == Phase::kFrozenWeights && b.tier == Tier::kGpu) on_gpu.push_back(b.what);
  }
  EXPECT_EQ(on_gpu, (std::vector<std::string>{"frozen weights: embeddings and final LayerNorm",
                                              "frozen weights: layers, matrices in NF4",
                                              "a layer's weights, unpacked"}));

  // ZeRO-3 over 8 GPUs shards the packed layers too: a rank holds an eighth
  // of the base, and gathers the embeddings, the final LayerNorm and two
  // layers (the one in use and the next) as their packed bytes; each unit's
  // chunk rounds up to 64 words.
  const JobConfig stage3 =
      testing::config_with(job, {R"(model.lora={"r": 8, "base_quant": "nf4"})", "zero_optimization.stage=3"});
  const Nf4Packing packing(model);
  for (int rank : {0, 7}) {
    MemoryPlan plan({Tier::kGpu, true, false});
    ASSERT_TRUE(Trainer::plan(stage3, 8, rank, {KernelBackend::kCuda}, plan).ok());
    const double held = static_cast<double>(at(plan.peaks(), Tier::kGpu, Category::kFrozen));
    EXPECT_NEAR(held, frozen / 8 + 2.0 * globals + 2.0 * packing.layer_bytes(), 9 * 64 * 4.0 * model.num_units())
        << "rank " << rank;
  }
}

// What a pass keeps for its backward grows as T, not T^2, on both tables
// (attention keeps statistics a query row), with checkpointing or without;
// attention's scratch stops growing past T = 2048 on the CPU (query rows
// in blocks) and at a head a chunk on the GPU.
TEST(MemoryPlanTest, ActivationsGrowAsTheSequence) {
  GptConfig gpt2 = *gpt_preset("gpt2");
  gpt2.block_size = 8192;
  for (const KernelMemory& k : {KernelMemory{KernelBackend::kCpu, 16}, KernelMemory{KernelBackend::kCuda}}) {
    const Tier tier = k.backend == KernelBackend::kCpu ? Tier::kHost : Tier::kGpu;
    for (bool checkpointing : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (tier == Tier::kHost ? "cpu" : "cuda") << ", checkpointing "
                                        << checkpointing);
      auto activations = [&](int T) {
        MemoryPlan plan({tier});
        Gpt::plan(gpt2, 2, T, DType::kBF16, checkpointing, false, k, plan);
        return at(plan.peaks(), tier, Category::kActivations);
      };
      for (int T : {1024, 2048, 4096}) EXPECT_EQ(activations(2 * T), 2 * activations(T)) << "T " << T;
    }
  }
  const KernelMemory cpu{KernelBackend::kCpu, 16}, cuda{KernelBackend::kCuda};
  EXPECT_EQ(cpu.attention_scratch_floats(2, 2048, 768, 12, DType::kF32), 2 * 16 * int64_t{2048} * 2048);
  EXPECT_EQ(cpu.attention_scratch_floats(2, 8192, 768, 12, DType::kF32), 2 * 16 * (int64_t{1} << 22));
  EXPECT_EQ(cuda.attention_scratch_floats(2, 8192, 768, 12, DType::kBF16),
            2 * int64_t{8192} * 8192 + 7 * int64_t{2} * 8192 * 768);  // a head a chunk, operands widened
}

// The GPU's head runs chunks whose products outweigh their traffic in wte's
// fp32 gradient (8 V C bytes a chunk against 2 rows V C flops: 256 flops a
// byte or more) at every vocabulary, and no larger than 2^26 logits where
// that already holds; never more rows than there are.
TEST(MemoryPlanTest, TheHeadsChunksKeepItsProductsAboveTheRidge) {
  const KernelMemory cuda{KernelBackend::kCuda};
  for (int V : {50257, 128256, 151936, 256000}) {
    SCOPED_TRACE(V);
    const int64_t rows = cuda.logits_rows(V, 1 << 20);
    EXPECT_GE(2 * rows / 8, 256);
    EXPECT_TRUE(rows == 1024 || rows * cuda.logits_stride(V) <= (int64_t{1} << 26)) << rows;
    EXPECT_EQ(cuda.logits_rows(V, 600), 600);
  }
  EXPECT_EQ(cuda.logits_rows(50257, 1 << 20), (int64_t{1} << 26) / 50304);  // gpt2's, as before
}

// The GPU tier's plan, on the CPU device standing in for a GPU (its memory
// the gpu tier, through the caching allocator, reached only by copies):
// every tier and category of a run equals the plan's, byte for byte.
class GpuTierPlanTest : public testing::TempDirTest {};

// The accountant's peaks `got` are the plan's `want`, every tier and category.
void expect_planned(const MemoryPeaks& want, const MemoryPeaks& got) {
  for (int t = 0; t < kNumTiers; ++t) {
    EXPECT_EQ(want.total[t], got.total[t]) << tier_name(static_cast<Tier>(t));
    for (int c = 0; c < kNumCategories; ++c) {
      EXPECT_EQ(want.peak[t][c], got.peak[t][c])
          << tier_name(static_cast<Tier>(t)) << " " << category_name(static_cast<Category>(c));
    }
  }
}

TEST_F(GpuTierPlanTest, EqualsTheAccountantsPeaksOfAStandInGpuRun) {
  const std::string nvme = "zero_optimization.offload_optimizer.nvme_path=\"" + dir_.string() + "\"";
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"bf16.enabled=true", "activation_checkpointing.enabled=true", "activation_checkpointing.cpu_checkpointing=true"},
      {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\"", "bf16.enabled=true"},
      {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=\"nvme\"", nvme,
       "zero_optimization.offload_param.device=\"cpu\"", "optimizer.type=\"AdamW8bit\""},
      {"zero_optimization.stage=3", "bf16.enabled=true", "run.checkpoint.async=false"},
      {"model.preset=llama-tiny", "zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\"",
       "bf16.enabled=true", "activation_checkpointing.enabled=true"},
      // LoRA: the frozen base replicated in bf16, sharded and offloaded at
      // stage 3, and in NF4: replicated, then packed layers sharded at
      // stage 3, in memory and in a file.
      {R"(model.lora={"r": 4, "target_modules": ["c_attn", "mlp.c_proj"]})", "bf16.enabled=true",
       "zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\""},
      {R"(model.lora={"r": 4})", "zero_optimization.stage=3", "zero_optimization.offload_param.device=\"cpu\""},
      {R"(model.lora={"r": 4, "base_quant": "nf4"})", "zero_optimization.stage=1"},
      {R"(model.lora={"r": 4, "base_quant": "nf4"})", "zero_optimization.stage=3", "bf16.enabled=true"},
      {R"(model.lora={"r": 4, "base_quant": "nf4"})", "zero_optimization.stage=3", "bf16.enabled=true",
       "zero_optimization.offload_param.device=\"cpu\""},
      {R"(model.lora={"r": 4, "base_quant": "nf4"})", "zero_optimization.stage=3",
       "zero_optimization.offload_param.device=\"nvme\"",
       "zero_optimization.offload_param.nvme_path=\"" + dir_.string() + "\""},
      // Layer-major steps: 3 micro-batches' block inputs, on the host and
      // on the GPU, under parameter offload and a QLoRA base.
      {"zero_optimization.accumulation=\"layer\"", "gradient_accumulation_steps=3", "zero_optimization.stage=3",
       "zero_optimization.offload_param.device=\"cpu\"", "bf16.enabled=true", "activation_checkpointing.enabled=true",
       "activation_checkpointing.cpu_checkpointing=true"},
      {R"(model.lora={"r": 4, "base_quant": "nf4"})", "zero_optimization.accumulation=\"layer\"",
       "gradient_accumulation_steps=3", "zero_optimization.stage=3", "activation_checkpointing.enabled=true"}};
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
    EXPECT_GT(acct.peaks().total[kGpu], 0u);
    expect_planned(plan.peaks(), acct.peaks());
  }
}

// A background save's staging is planned only where it fits the host's
// limit beside the pinned memory, which the limit holds too, as the
// accountant then allows it: one byte short of the uncapped plan's host and
// pinned memory leaves it out, and the run under that limit is its plan.
TEST_F(GpuTierPlanTest, TheSavesStagingFitsTheHostLimitWithThePinnedMemory) {
  const PinningHook registers{[](void*, uint64_t) { return absl::OkStatus(); }, [](void*) {}};
  set_pinning_hook(&registers);
  nlohmann::json j = testing::tiny_job();
  j["run"]["steps"] = 2;
  j["run"]["checkpoint"] = {{"dir", path("ckpt")}};
  JobConfig cfg = testing::config_with(
      j, {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"cpu\"", "bf16.enabled=true"});
  MemoryAccountant acct;
  CpuDeviceOptions options;
  options.gpu_tier = true;
  options.pins = true;
  CpuDevice device(acct, options);
  auto planned = [&] {
    MemoryPlan plan(plan_device(device));
    EXPECT_TRUE(Trainer::plan(cfg, 1, 0, kernel_memory_for(device), plan).ok());
    return plan;
  };
  // The most host and pinned memory any phase holds, and whether a staging is planned.
  auto host = [](const MemoryPlan& plan) {
    uint64_t most = 0;
    for (int p = 0; p < kNumPhases; ++p) {
      const MemoryPeaks h = plan.held(static_cast<Phase>(p));
      most = std::max(most, h.total[static_cast<int>(Tier::kHost)] + h.total[static_cast<int>(Tier::kPinned)]);
    }
    return most;
  };
  auto stages = [](const MemoryPlan& plan) {
    return std::ranges::any_of(plan.buffers(), [](const PlannedBuffer& b) { return b.what == "checkpoint staging"; });
  };
  const MemoryPlan uncapped = planned();
  ASSERT_TRUE(stages(uncapped));
  ASSERT_GT(uncapped.peaks().total[static_cast<int>(Tier::kPinned)], 0u);
  cfg.run.host_memory_limit = host(uncapped) - 1;
  const MemoryPlan plan = planned();
  EXPECT_FALSE(stages(plan));
  EXPECT_LE(host(plan), *cfg.run.host_memory_limit);
  acct.set_limit(Tier::kHost, *cfg.run.host_memory_limit);
  {
    auto t = Trainer::create(cfg, nullptr, &device);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE((*t)->step().ok());
      if (i == 0) ASSERT_TRUE((*t)->start_checkpoint(path("ckpt"), 1, /*background=*/true).ok());
    }
    ASSERT_TRUE((*t)->finish_checkpoint(true).ok());
  }
  set_pinning_hook(nullptr);
  expect_planned(plan.peaks(), acct.peaks());
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

TEST_F(EstimateTest, RefusesImpossibleMachinesAndFitSettingsNamingTheFlag) {
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
      // --fit's own.
      {{"--fit"}, "--fit needs the machines' memory"},
      {{"--fit", "--host-memory", "1GiB", "--allow", "fp8"}, "--allow"},
      {{"--fit", "--host-memory", "1GiB", "--top", "0"}, "--top"},
      {{"--fit", "--host-memory", "1GiB", "--pcie-bandwidth", "fast"}, "--pcie-bandwidth: 'fast' is not a byte size"},
      {{"--fit", "--host-memory", "1GiB", "--flops", "-3"}, "--flops"},
      {{"--fit", "--host-memory", "1GiB", "--out", "/no/such/dir/best.json"}, "/no/such/dir/best.json"},
      {{"--fit", "--host-memory", "1GiB", "--dequantize-rate", "0"}, "--dequantize-rate"},
      {{"--fit", "--host-memory", "1GiB", "--lora-ranks", "8,0"}, "--lora-ranks"},
      {{"--fit", "--host-memory", "1GiB", "--lora-ranks", "8"}, "--lora-ranks: the job trains no adapters"},
      {{"--fit", "--host-memory", "1GiB", "--set", R"(model.lora={"r": 4})", "--lora-ranks", "8,65"},
       "--lora-ranks 65: model.lora.r is 65, larger than c_attn [64 -> 192] allows (64)"},
      {{"--fit", "--host-memory", "1GiB", "--set", R"(model.lora={"r": 4, "init_from": "adapter"})", "--lora-ranks",
        "8"},
       "--lora-ranks: the job starts from the adapters in model.lora.init_from, whose rank is theirs"},
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

// A LoRA job's estimate names the adapters and the frozen base, and counts
// the base apart: under half its fp32 bytes in NF4 (the tiny model's
// matrices are most of it), the trained state the adapters' alone.
TEST_F(EstimateTest, ALoraJobShowsItsFrozenBaseApart) {
  nlohmann::json j = testing::tiny_job();
  j["model"]["lora"] = {{"r", 4}, {"base_quant", "nf4"}};
  const Result e = estimate({"--config", job(j), "--json"});
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json got = nlohmann::json::parse(e.out);
  const GptConfig m = testing::config_with(j, {}).model;
  EXPECT_EQ(got["params"], gpt_param_count(m));
  EXPECT_EQ(got["trained_params"], m.n_layer * 4 * 4 * m.n_embd);
  const nlohmann::json& host = got["per_rank"]["host"];
  EXPECT_GT(host["frozen"].get<uint64_t>(), 0u);
  EXPECT_LT(host["frozen"].get<uint64_t>(), 4u * gpt_param_count(m) / 2);
  EXPECT_LT(host["optimizer"].get<uint64_t>(), 16u * m.n_layer * 4 * 4 * m.n_embd);
  const Result text = estimate({"--config", job(j)});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find(absl::StrCat(gpt_param_count(m), " parameters (frozen, in NF4), LoRA adapters of ",
                                       m.n_layer * 4 * 4 * m.n_embd, " parameters (r 4 on c_attn)")),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("frozen"), std::string::npos);
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

// The estimate says how the job's micro-batches would leave the GPU: the
// gpt2-xl offload example (8 micro-batches a step, its optimizer on the
// host) keeps their 6.2 GB sum on an 80 GiB GPU, and under the example's
// own 12 GiB cap sends each in bf16 but for the first units' sums, which
// fill what the cap leaves, the host holding them to add four a pass where
// its memory allows.
TEST_F(EstimateTest, SaysWhetherTheMicroBatchesGradientsAreSummedOnTheGpu) {
  const std::string example = ZEROD_SOURCE_DIR "/examples/gpt2-xl-offload.json";
  const std::vector<std::string> own = {"--config", example, "--set", "model.init_from=null"};
  const Result roomy = estimate(testing::joined(own, {"--set", "run.gpu_memory_limit=null", "--gpu-memory", "80GiB"}));
  ASSERT_EQ(roomy.code, 0) << roomy.err;
  const uint64_t sum = CachingAllocator::block_size(Partition(GptLayout(*gpt_preset("gpt2-xl")), 1).shard_numel() * 4);
  // The example updates during backward (no clipping, bf16): sums kept
  // on the GPU are updated there.
  EXPECT_NE(roomy.out.find("micro-batch gradients (micro_batch_grads fp32): summed in fp32 on the device, updated "
                           "there (its masters and states copied up and back) | auto: the step's gradient sum on "
                           "the GPU (" +
                           byte_size_text(sum) + ") takes a rank to "),
            std::string::npos)
      << roomy.out;
  EXPECT_NE(roomy.out.find(", within the 80.0 GiB the GPU holds\n"), std::string::npos) << roomy.out;
  const Result capped = estimate(testing::joined(own, {"--json"}));
  ASSERT_EQ(capped.code, 0) << capped.err;
  const nlohmann::json r = nlohmann::json::parse(capped.out);
  EXPECT_EQ(r["micro_batch_grads"], "compute");
  EXPECT_NE(r["micro_batch_grads_auto"].get<std::string>().find(", over run.gpu_memory_limit 12.0 GiB"),
            std::string::npos)
      << r;
  const Result said = estimate(own);
  ASSERT_EQ(said.code, 0) << said.err;
  EXPECT_NE(said.out.find(" summed on the device, updated there (its masters and states copied up and back); the "
                          "others' sent to the host in bf16"),
            std::string::npos)
      << said.out;
  // The others' updates are shared between the host and the device.
  EXPECT_NE(said.out.find(", each updated there or on the device (its sum copied up too), whichever is planned to "
                          "finish first"),
            std::string::npos)
      << said.out;
  EXPECT_GT(r["per_rank"]["gpu"]["grads"].get<uint64_t>(), 0u);
  EXPECT_LT(r["per_rank"]["gpu"]["grads"].get<uint64_t>(), sum);
  EXPECT_LE(r["per_rank"]["gpu"]["total"].get<uint64_t>(), uint64_t{12} << 30);
  // The others' micro-batches are held and added four a pass where half
  // the described node's memory holds them (128 GiB), not where it does
  // not (32 GiB: the plan without them is 23 GiB).
  for (const auto& [node, holds] : {std::pair{"128GiB", true}, std::pair{"32GiB", false}}) {
    SCOPED_TRACE(node);
    const Result described = estimate(testing::joined(own, {"--gpu-memory", "80GiB", "--host-memory", node}));
    ASSERT_EQ(described.code, 0) << described.err;
    EXPECT_EQ(described.out.find("sent to the host in bf16, summed there in fp32, 4 micro-batches a pass,") !=
                  std::string::npos,
              holds)
        << described.out;
  }
}

// The cost model's seconds, against its formulas written out by hand for
// three jobs: the CPU one-rank job, a GPU ZeRO-3 job with everything on the
// host, and NVMe states shared by two ranks of a node.
TEST(FitTest, StepCostIsTheStatedModel) {
  const FitRates rates{1e9, 2e9, 3e9, 4e9, 5e9, 6e9};  // flops, host, PCIe, network, NVMe, NF4 weights
  JobConfig cfg = testing::config_with(testing::tiny_job(), {});
  const double psi = static_cast<double>(gpt_param_count(cfg.model));
  const double L = cfg.model.n_layer, C = cfg.model.n_embd, T = cfg.data.seq_len, B = cfg.micro_batch;
  Machines one;
  StepCost c = step_cost(cfg, one, rates);
  EXPECT_DOUBLE_EQ(c.compute, (6 * psi + 12 * L * T * C) * B * T / 1e9);
  EXPECT_DOUBLE_EQ(c.optimizer, psi * (4 + 8 + 16) / 2e9);  // fp32: no 16-bit copy to write
  EXPECT_EQ(c.pcie + c.network + c.nvme, 0);

  cfg = testing::config_with(testing::tiny_job(),
                             {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=\"cpu\"",
                              "zero_optimization.offload_param.device=\"cpu\"", "bf16.enabled=true",
                              "activation_checkpointing.enabled=true", "gradient_accumulation_steps=2"},
                             4);
  Machines gpus;
  gpus.ranks = 4;
  gpus.gpu = true;
  c = step_cost(cfg, gpus, rates);
  EXPECT_DOUBLE_EQ(c.compute, (6 * psi + 12 * L * T * C) * 4 / 3 * B * 2 * T / 1e9);
  EXPECT_DOUBLE_EQ(c.optimizer, psi / 4 * (4 + 8 + 16 + 2) / 2e9);
  // Gradients down each micro-step, parameters up after the update and for
  // each gather (forward and backward of both micro-steps).
  EXPECT_DOUBLE_EQ(c.pcie, (psi / 4 * (4 * 2 + 2) + 2 * 2 * psi / 4 * 2) / 3e9);
  EXPECT_DOUBLE_EQ(c.network, 0.75 * (4 + 2 * 2) * 2 * psi / 4e9);
  EXPECT_EQ(c.nvme, 0);
  // Layer by layer: each layer gathered and its gradients sent once a step.
  cfg.zero.accumulation = Accumulation::kLayer;
  const StepCost layers = step_cost(cfg, gpus, rates);
  EXPECT_DOUBLE_EQ(layers.pcie, (psi / 4 * (4 + 2) + 2 * psi / 4 * 2) / 3e9);
  EXPECT_DOUBLE_EQ(layers.network, 0.75 * (4 + 2 * 2) * psi / 4e9);
  EXPECT_DOUBLE_EQ(layers.compute, c.compute);
  // Block inputs in pinned host memory: each micro-batch's L + 1 of B x T
  // x C bf16 values written, read going up and read for the recompute.
  cfg.cpu_checkpointing = true;
  EXPECT_DOUBLE_EQ(step_cost(cfg, gpus, rates).pcie, layers.pcie + 3 * 2 * (L + 1) * B * T * C * 2 / 3e9);

  cfg = testing::config_with(testing::tiny_job(),
                             {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"nvme\"",
                              "zero_optimization.offload_optimizer.nvme_path=\"/tmp\""},
                             2);
  Machines node;
  node.ranks = 2;
  c = step_cost(cfg, node, rates);
  EXPECT_DOUBLE_EQ(c.nvme, 2 * (2 * psi / 2 * (4 + 8)) / 5e9);  // two ranks read and write their states
  EXPECT_DOUBLE_EQ(c.network, 0.5 * (4 + 4) * psi / 4e9);
  EXPECT_DOUBLE_EQ(c.total(), c.compute + c.optimizer + c.pcie + c.network + c.nvme);

  // LoRA: the adapters (r 4 on c_attn: 4 x (C + 3C) a layer) are trained,
  // the frozen model needs no weight gradients and is gathered at stage 3,
  // in NF4 as its packed bytes.
  const std::string lora = R"(model.lora={"r": 4})";
  cfg = testing::config_with(testing::tiny_job(), {lora, "zero_optimization.stage=3", "bf16.enabled=true"}, 2);
  const double adapters = L * 4 * 4 * C;
  c = step_cost(cfg, node, rates);
  EXPECT_DOUBLE_EQ(c.compute, (6 * adapters + 4 * psi + 12 * L * T * C) * B * T / 1e9);
  EXPECT_DOUBLE_EQ(c.optimizer, adapters / 2 * (4 + 8 + 16 + 2) / 2e9);
  EXPECT_DOUBLE_EQ(c.network, 0.5 * ((4 + 2 * 2) * adapters + 2 * 2 * psi) / 4e9);
  cfg = testing::config_with(testing::tiny_job(),
                             {lora, "model.lora.base_quant=\"nf4\"", "zero_optimization.stage=3", "bf16.enabled=true"},
                             2);
  // A layer: 13C fp32 biases and LayerNorm values, then C x 3C, C x C,
  // C x 4C and 4C x C weights in NF4 (an fp32 absmax a group, the offset
  // and the map of 256 values; codes and a code a block), each part rounded
  // up to 16 bytes; the embeddings (vocabulary and positions) and final
  // LayerNorm in fp32.
  const auto up16 = [](double b) { return std::ceil(b / 16) * 16; };
  const auto nf4 = [&](double n) { return up16(4 * (std::ceil(n / 64 / 256) + 1 + 256)) + up16(n / 2 + n / 64); };
  const double V = cfg.model.vocab_size, P = cfg.model.block_size;
  const double nf4_model =
      4 * (V * C + P * C + 2 * C) + L * (up16(4 * 13 * C) + nf4(3 * C * C) + nf4(C * C) + 2 * nf4(4 * C * C));
  EXPECT_DOUBLE_EQ(step_cost(cfg, node, rates).network, 0.5 * ((4 + 2 * 2) * adapters + 2 * nf4_model) / 4e9);
  // Its linear layers are dequantized for the forward and the backward of
  // each micro-step; with checkpointing the forward runs again, a frozen
  // weight's 2 FLOPs a token with it.
  cfg = testing::config_with(testing::tiny_job(),
                             {lora, "model.lora.base_quant=\"nf4\"", "zero_optimization.stage=3", "bf16.enabled=true",
                              "activation_checkpointing.enabled=true", "gradient_accumulation_steps=2"},
                             2);
  c = step_cost(cfg, node, rates);
  EXPECT_DOUBLE_EQ(c.dequantize, 2 * 2 * L * (3 * C * C + C * C + 4 * C * C + 4 * C * C) / 6e9);
  EXPECT_DOUBLE_EQ(c.compute, (8 * adapters + 6 * psi + 16 * L * T * C) * B * 2 * T / 1e9);
  EXPECT_DOUBLE_EQ(c.total(), c.compute + c.optimizer + c.pcie + c.network + c.nvme + c.dequantize);
  EXPECT_EQ(step_cost(testing::config_with(testing::tiny_job(), {lora}), node, rates).dequantize, 0);
}

// gpt2-xl's fine-tune example on a 12 GiB GPU and 64 GiB of host memory:
// as it is it does not fit; --fit lists configurations that do, fastest
// first, and the best, written out, is a config zero-worker reads and
// whose plan passes zero-worker's start-up check under a 12 GiB cap.
TEST_F(EstimateTest, FitFindsGpt2XlConfigurationsForA12GiBGpu) {
  const std::string example = std::string(ZEROD_SOURCE_DIR) + "/examples/gpu_gpt2_xl_finetune.json";
  const Result as_is = estimate({"--config", example, "--json", "--gpu-memory", "12GiB", "--host-memory", "64GiB"});
  ASSERT_EQ(as_is.code, 0) << as_is.err;
  EXPECT_EQ(nlohmann::json::parse(as_is.out)["fits"], false);

  const std::string best = path("best.json");
  const Result r = estimate({"--config", example, "--json", "--fit", "--gpu-memory", "12GiB", "--host-memory", "64GiB",
                             "--top", "50", "--out", best});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json fit = nlohmann::json::parse(r.out);
  ASSERT_GT(fit["fitting"].get<int>(), 0);
  const nlohmann::json& list = fit["configurations"];
  ASSERT_EQ(list.size(), std::min(50, fit["fitting"].get<int>()));
  EXPECT_FALSE(fit.contains("longest_seq_len")) << "GPT-2's learned positions bound its sequence";
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& c = list[i];
    EXPECT_LE(c["per_rank"]["gpu"]["total"].get<uint64_t>(), uint64_t{12} << 30);
    EXPECT_LE(c["per_rank"]["host"]["total"].get<uint64_t>() + c["per_rank"]["pinned"]["total"].get<uint64_t>(),
              uint64_t{64} << 30);
    if (i > 0) {
      EXPECT_LE(list[i - 1]["seconds_per_step"].get<double>(), c["seconds_per_step"].get<double>());
    }
    // The global batch of 8 sequences of 1024 tokens is kept.
    EXPECT_DOUBLE_EQ(c["tokens_per_s"].get<double>() * c["seconds_per_step"].get<double>(), 8 * 1024);
  }
  EXPECT_NE(list[0]["changes"].dump().find("offload"), std::string::npos) << list[0]["changes"];

  // zero-worker's reader and start-up check, on the file written.
  auto cfg = load_job_config(best, {}, 1);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(nlohmann::json::parse(*read_whole_file(best)), fit["best_config"]);
  MemoryPlan plan({Tier::kGpu, /*pins=*/true, /*caches_blocks=*/true});
  KernelMemory kernels;
  kernels.backend = KernelBackend::kCuda;
  ASSERT_TRUE(Trainer::plan(*cfg, 1, 0, kernels, plan).ok());
  EXPECT_EQ(plan.peaks().total[kGpu], list[0]["per_rank"]["gpu"]["total"].get<uint64_t>());
  cfg->run.gpu_memory_limit = uint64_t{12} << 30;
  EXPECT_TRUE(check_memory_plan(*cfg, 0, 1, plan.peaks(), NodeMemory{}).ok());

  const Result text = estimate({"--config", example, "--fit", "--gpu-memory", "12GiB", "--host-memory", "64GiB"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("configurations fit 1 rank on 1 node"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("the best, a config zero-worker accepts:\n" + fit["best_config"].dump(2)), std::string::npos)
      << text.out;
}

// gpt2-xl's offload example under a 4 GiB GPU: only with its parameters
// offloaded does it fit, and then the step goes layer by layer, its 8
// micro-batches' block inputs in pinned host memory: each layer uploaded
// once a step rather than 8 times, faster by the cost model than any
// configuration in micro-batch order; the config written trains so.
TEST_F(EstimateTest, FitGoesLayerByLayerWhereTheParametersAreUploaded) {
  const std::string example = std::string(ZEROD_SOURCE_DIR) + "/examples/gpt2-xl-offload.json";
  const std::string best = path("best.json");
  const Result r = estimate({"--config", example, "--set", "model.init_from=null", "--json", "--fit", "--gpu-memory",
                             "4GiB", "--host-memory", "128GiB", "--top", "1000", "--out", best});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json fit = nlohmann::json::parse(r.out);
  const nlohmann::json& list = fit["configurations"];
  ASSERT_GT(fit["fitting"].get<int>(), 0);
  const auto layered = [](const nlohmann::json& c) {
    return c["changes"].dump().find("accumulation=\\\"layer\\\"") != std::string::npos;
  };
  EXPECT_TRUE(layered(list[0])) << list[0]["changes"];
  EXPECT_NE(list[0]["changes"].dump().find("cpu_checkpointing=true"), std::string::npos) << list[0]["changes"];
  double fastest_in_turn = 0;
  for (const nlohmann::json& c : list) {
    if (!c["fits"].get<bool>() || layered(c)) continue;
    fastest_in_turn = c["seconds_per_step"].get<double>();
    break;
  }
  ASSERT_GT(fastest_in_turn, 0);
  // The cost model's seconds (fit.h's formulas at its stated rates), not a
  // measured time.
  EXPECT_LT(list[0]["seconds_per_step"].get<double>(), fastest_in_turn);
  auto cfg = load_job_config(best, {}, 1);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->zero.accumulation, Accumulation::kLayer);
  EXPECT_TRUE(cfg->cpu_checkpointing);
}

// The largest example, 12.8B parameters, fits the GPU machines this
// project is tested on as it is (one GPU of 80 GiB, 128 GiB of host memory,
// 64 GiB of disk); and docs/memory-plan.md's figures on paper: a 69.7B GPT of the
// same family fits one GPU of 80 GiB with 256 GiB of host memory and 2 TB of
// NVMe once --fit moves its states to the NVMe, its parameters to the host.
TEST_F(EstimateTest, TheLargestExampleFitsTheGpuMachinesAndA70BFitsOnPaper) {
  const std::string example = std::string(ZEROD_SOURCE_DIR) + "/examples/gpt-12b-offload.json";
  const Result r =
      estimate({"--config", example, "--json", "--gpu-memory", "80GiB", "--host-memory", "128GiB", "--nvme", "64GiB"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json as_is = nlohmann::json::parse(r.out);
  EXPECT_EQ(as_is["fits"], true) << as_is["per_node"];
  EXPECT_GT(as_is["params"].get<int64_t>(), int64_t{12'000'000'000});

  const Result big = estimate({"--config", example, "--set", "model.n_layer=86", "--set", "model.n_embd=8192", "--set",
                               "model.n_head=64", "--json", "--fit", "--gpu-memory", "80GiB", "--host-memory", "256GiB",
                               "--nvme", "2TB", "--nvme-path", path("nvme")});
  ASSERT_EQ(big.code, 0) << big.err;
  const nlohmann::json fit = nlohmann::json::parse(big.out);
  ASSERT_GT(fit["fitting"].get<int>(), 0);
  const nlohmann::json& best = fit["configurations"][0];
  EXPECT_LE(best["per_rank"]["gpu"]["total"].get<uint64_t>(), uint64_t{80} << 30);
  EXPECT_LE(best["per_rank"]["host"]["total"].get<uint64_t>() + best["per_rank"]["pinned"]["total"].get<uint64_t>(),
            uint64_t{256} << 30);
  const auto& changes = best["changes"];
  EXPECT_NE(std::find(changes.begin(), changes.end(), "zero_optimization.offload_optimizer.device=\"nvme\""),
            changes.end())
      << changes;
}

// The Llama family's examples fit their own caps on a node of 128 GiB, by
// the plan: Llama-3.2-1B in full under 8 GiB (bf16 parameters on the GPU,
// AdamW's masters and states pinned on the host), Llama-3.1-8B's QLoRA
// under 12 GiB (its NF4 base on the GPU, 0.52 bytes a weight), Qwen2.5-7B in
// full under 40 GiB (its optimizer on the host) and Llama-3.1-70B's QLoRA
// under 24 GiB (its NF4 base pinned on the host).
TEST_F(EstimateTest, TheLlamaExamplesFitTheirCaps) {
  struct Example {
    const char* file;
    int cap_gib;
    int64_t params;
    const char* big_tier;  // where most of the run's state goes
    const char* category;
  };
  for (const Example& x : {Example{"llama-3.2-1b-finetune", 8, 1235814400, "pinned", "optimizer"},
                           Example{"llama-3.1-8b-qlora", 12, 8030261248, "gpu", "frozen"},
                           Example{"qwen2.5-7b-offload", 40, 7615616512, "pinned", "optimizer"},
                           Example{"llama-3.1-70b-qlora", 24, 70553706496, "pinned", "frozen"}}) {
    SCOPED_TRACE(x.file);
    const std::string example = std::string(ZEROD_SOURCE_DIR) + "/examples/" + x.file + ".json";
    const Result e = estimate({"--config", example, "--json", "--host-memory", "128GiB"});
    ASSERT_EQ(e.code, 0) << e.err;
    const nlohmann::json r = nlohmann::json::parse(e.out);
    EXPECT_EQ(r["fits"], true) << r;
    EXPECT_EQ(r["params"], x.params) << r;
    EXPECT_LE(r["per_rank"]["gpu"]["total"].get<uint64_t>(), uint64_t(x.cap_gib) << 30);
    // The model's bytes at 16 bits or less in full, 0.5 a weight in NF4.
    EXPECT_GE(r["per_rank"][x.big_tier][x.category].get<uint64_t>(), uint64_t(x.params) * 2 / 5);
  }
}

// Llama-3.1-70B's QLoRA on one 24 GiB GPU and 128 GiB of host memory: the
// frozen weights on the GPU are the embeddings and the head once each in
// bf16 and two layers' NF4 bytes (an fp32 copy of either global alone
// would be 4 V C bytes more); --fit's longest sequence is one the plan fits
// and 128 more is one it does not; a host or a GPU too small is refused,
// naming the bytes, the worker's before it allocates anything.
TEST_F(EstimateTest, Llama70bQloraFitsA24GiBGpuAndSaysItsLongestSequence) {
  const std::string example = std::string(ZEROD_SOURCE_DIR) + "/examples/llama-3.1-70b-qlora.json";
  const std::vector<std::string> machine = {"--gpu-memory", "24GiB", "--host-memory", "128GiB"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--config", example, "--json"});
    args.insert(args.end(), machine.begin(), machine.end());
    return estimate(args);
  };
  const Result e = with({});
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json as_is = nlohmann::json::parse(e.out);
  EXPECT_EQ(as_is["fits"], true) << as_is;
  const uint64_t V = 128256, C = 8192, layer = 855654400;
  const uint64_t frozen = as_is["per_rank"]["gpu"]["frozen"];
  EXPECT_GE(frozen, 2 * V * C * 2);
  EXPECT_LE(frozen, 2 * V * C * 2 + 2 * layer * 6 / 10);  // 0.52 bytes a weight in NF4

  const std::string best = path("best.json");
  const Result f = with({"--fit", "--out", best});
  ASSERT_EQ(f.code, 0) << f.err;
  const nlohmann::json fit = nlohmann::json::parse(f.out);
  const int64_t longest = fit["longest_seq_len"];
  EXPECT_GE(longest, 2048);
  EXPECT_EQ(longest % 128, 0);
  auto fits_at = [&](int64_t t) {
    const Result r = estimate({"--config", best, "--json", "--set", absl::StrCat("data.seq_len=", t), "--set",
                               absl::StrCat("model.block_size=", t), machine[0], machine[1], machine[2], machine[3]});
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["fits"].get<bool>();
  };
  EXPECT_TRUE(fits_at(longest));
  EXPECT_FALSE(fits_at(longest + 128));
  // Another configuration at one sequence a micro-batch fits a longer
  // one, which --fit names with its changes: the plan of the job with them
  // fits at that length.
  const nlohmann::json& any = fit["longest_seq_len_any"];
  ASSERT_TRUE(any.is_object()) << fit;
  const int64_t any_longest = any["seq_len"];
  EXPECT_GT(any_longest, longest);
  std::vector<std::string> args = {"--config", example, "--json", "--set", absl::StrCat("data.seq_len=", any_longest),
                                   "--set", absl::StrCat("model.block_size=", any_longest)};
  for (const nlohmann::json& change : any["changes"]) args.insert(args.end(), {"--set", change.get<std::string>()});
  args.insert(args.end(), machine.begin(), machine.end());
  const Result at_any = estimate(args);
  ASSERT_EQ(at_any.code, 0) << at_any.err;
  EXPECT_EQ(nlohmann::json::parse(at_any.out)["fits"], true);

  // A model of fewer positions is not searched past them: Qwen2.5-0.5B's
  // 32768, which its leanest configuration fits in 80 GiB with room to
  // spare (its fastest, 8 sequences a micro-batch without checkpointing,
  // stops at 9,856).
  const Result small = estimate({"--config", example, "--json", "--fit", "--set", "model.preset=\"qwen2.5-0.5b\"",
                                 "--gpu-memory", "80GiB", "--host-memory", "128GiB"});
  ASSERT_EQ(small.code, 0) << small.err;
  const nlohmann::json small_fit = nlohmann::json::parse(small.out);
  EXPECT_LT(small_fit["longest_seq_len"].get<int64_t>(), 32768);
  EXPECT_EQ(small_fit["longest_seq_len_any"]["seq_len"], 32768) << small_fit["longest_seq_len_any"];

  // Too small a host for the pinned NF4 base (36.8 GiB) and the block
  // inputs (20.2 GiB), too small a GPU
  // for a layer's operands: refused by the plan, naming the bytes.
  const Result host = estimate({"--config", example, "--gpu-memory", "24GiB", "--host-memory", "32GiB"});
  EXPECT_NE(host.out.find("host memory per node 32.0 GiB: needs 65.1 GiB, does not fit"), std::string::npos)
      << host.out;
  const Result gpu = estimate({"--config", example, "--gpu-memory", "2GiB", "--host-memory", "128GiB"});
  EXPECT_NE(gpu.out.find("GPU memory per GPU 2.0 GiB: needs 12.5 GiB, does not fit"), std::string::npos) << gpu.out;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(example));
  j["run"]["device"] = "cpu";  // the same plan's check, where this machine has no GPU
  j["run"]["host_memory_limit"] = "16GiB";
  j["data"]["path"] = std::string(ZEROD_SOURCE_DIR) + "/docs/*.md";
  const testing::WorkerResult refused = testing::run_worker_with({"--config", job(j)});
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_NE(refused.err.find("run.host_memory_limit"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("GiB"), std::string::npos) << refused.err;
}

// A machine too small for any configuration: said, with the closest one
// and by how much it is short; exit 1 and no config written.
TEST_F(EstimateTest, FitSaysByHowMuchWhenNothingFits) {
  const std::string example = std::string(ZEROD_SOURCE_DIR) + "/examples/gpu_gpt2_xl_finetune.json";
  const std::vector<std::string> machine = {"--config",      example, "--fit", "--gpu-memory",   "1GiB",
                                            "--host-memory", "8GiB",  "--out", path("best.json")};
  const Result text = estimate(machine);
  EXPECT_EQ(text.code, 1) << text.err;
  EXPECT_NE(text.out.find("no configuration fits; the closest ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("short"), std::string::npos) << text.out;
  EXPECT_FALSE(std::filesystem::exists(path("best.json")));
  std::vector<std::string> as_json = machine;
  as_json.push_back("--json");
  const Result j = estimate(as_json);
  EXPECT_EQ(j.code, 1);
  const nlohmann::json r = nlohmann::json::parse(j.out);
  EXPECT_EQ(r["fitting"], 0);
  EXPECT_TRUE(r["best_config"].is_null());
  // The shortfall is what the closest needs past each capacity.
  const nlohmann::json& c = r["closest"]["per_rank"];
  const auto past = [](uint64_t needed, uint64_t capacity) { return needed > capacity ? needed - capacity : 0; };
  EXPECT_EQ(r["closest"]["shortfall"].get<uint64_t>(),
            past(c["gpu"]["total"].get<uint64_t>(), uint64_t{1} << 30) +
                past(c["host"]["total"].get<uint64_t>() + c["pinned"]["total"].get<uint64_t>(), uint64_t{8} << 30));
  EXPECT_GT(r["closest"]["shortfall"].get<uint64_t>(), 0u);
}

// --allow lets the search change numerics; without it every configuration
// keeps the job's precision and optimizer.
TEST_F(EstimateTest, FitChangesNumericsOnlyWhenAllowed) {
  const std::string cfg = job();
  for (bool allowed : {false, true}) {
    std::vector<std::string> a = {"--config", cfg, "--json", "--fit", "--host-memory", "64GiB", "--top", "1000"};
    if (allowed) a.insert(a.end(), {"--allow", "bf16,8bit"});
    const Result r = estimate(a);
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string all = nlohmann::json::parse(r.out)["configurations"].dump();
    EXPECT_EQ(all.find("bf16.enabled=true") != std::string::npos, allowed);
    EXPECT_EQ(all.find("AdamW8bit") != std::string::npos, allowed);
  }
}

// A LoRA job: --allow nf4 lets the search hold the base in NF4 (QLoRA)
// where a 16-bit base does not fit, and only there, as dequantizing costs
// time; --lora-ranks gives the adapters the largest rank that fits, alpha
// moved with r to keep the job's scale, under the name the job gives it.
// Llama-3.1-8B's example (r 16, lora_alpha 32) over a bf16 base.
TEST_F(EstimateTest, FitPicksLoraAndQloraSettings) {
  const std::string example = std::string(ZEROD_SOURCE_DIR) + "/examples/llama-3.1-8b-qlora.json";
  const auto fit = [&](const std::string& gpu, std::vector<std::string> more) {
    std::vector<std::string> a = {"--config", example, "--set", "model.lora.base_quant=\"none\"", "--json", "--fit",
                                  "--gpu-memory", gpu, "--host-memory", "128GiB", "--top", "10000"};
    a.insert(a.end(), more.begin(), more.end());
    const Result r = estimate(a);
    EXPECT_TRUE(r.code == 0 || r.code == 1) << r.err;  // 1: nothing fits
    return nlohmann::json::parse(r.out);
  };
  const auto has = [](const nlohmann::json& changes, const std::string& c) {
    return std::find(changes.begin(), changes.end(), c) != changes.end();
  };
  const std::string nf4 = "model.lora.base_quant=\"nf4\"";

  // 48 GiB holds the bf16 base (16 GB) on the GPU: kept, faster than NF4.
  nlohmann::json big = fit("48GiB", {"--allow", "nf4"});
  ASSERT_GT(big["fitting"].get<int>(), 0);
  EXPECT_FALSE(has(big["configurations"][0]["changes"], nf4)) << big["configurations"][0];
  EXPECT_EQ(big["configurations"][0]["cost"]["dequantize"], 0.0);
  // 12 GiB: the bf16 base only with offloaded parameters, uploaded twice a
  // micro-step; NF4 on the GPU is faster. Without --allow nf4 no config
  // holds the base in NF4.
  nlohmann::json small = fit("12GiB", {"--allow", "nf4"});
  ASSERT_GT(small["fitting"].get<int>(), 0);
  const nlohmann::json& best = small["configurations"][0];
  EXPECT_TRUE(has(best["changes"], nf4)) << best;
  EXPECT_GT(best["cost"]["dequantize"].get<double>(), 0);
  EXPECT_LE(best["per_rank"]["gpu"]["total"].get<uint64_t>(), uint64_t{12} << 30);
  for (const nlohmann::json& c : fit("12GiB", {})["configurations"]) EXPECT_FALSE(has(c["changes"], nf4)) << c;
  // With the base on the GPU, each configuration holding it in NF4 is
  // slower than the same one in bf16.
  std::map<std::string, double> seconds;
  for (const nlohmann::json& c : big["configurations"]) {
    if (has(c["changes"], "zero_optimization.offload_param.device=\"cpu\"")) continue;
    std::vector<std::string> rest;
    for (const auto& change : c["changes"]) {
      if (change != nf4) rest.push_back(change);
    }
    seconds[absl::StrJoin(rest, " ") + (has(c["changes"], nf4) ? " nf4" : "")] = c["seconds_per_step"];
  }
  int compared = 0;
  for (const auto& [key, s] : seconds) {
    if (!key.ends_with(" nf4") || !seconds.contains(key.substr(0, key.size() - 4))) continue;
    EXPECT_GT(s, seconds[key.substr(0, key.size() - 4)]) << key;
    ++compared;
  }
  EXPECT_GT(compared, 0);

  // Ranks: the largest that fits, alpha keeping alpha / r at 2.
  const nlohmann::json ranked = fit("12GiB", {"--allow", "nf4", "--lora-ranks", "8,16,64"});
  const nlohmann::json& top = ranked["configurations"][0];
  EXPECT_TRUE(has(top["changes"], "model.lora.r=64")) << top;
  EXPECT_TRUE(has(top["changes"], "model.lora.lora_alpha=128.0")) << top;
  int previous = 64;
  for (const nlohmann::json& c : ranked["configurations"]) {
    const int r = has(c["changes"], "model.lora.r=64") ? 64 : has(c["changes"], "model.lora.r=8") ? 8 : 16;
    EXPECT_LE(r, previous) << c;
    previous = r;
  }
  auto cfg = parse_job_config(ranked["best_config"], 1);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->lora->adapters.r, 64);
  EXPECT_EQ(cfg->lora->adapters.scale(), 2.0f);

  // A GPU where r 64 fits at no setting but r 16 does (the plan adapts to
  // the capacity, so it is looked for) takes r 16, and a job naming
  // zerod's alpha keeps that name.
  std::string cap;
  for (int quarters = 16; quarters <= 48 && cap.empty(); ++quarters) {
    const std::string gpu = absl::StrCat(quarters / 4.0, "GiB");
    if (fit(gpu, {"--allow", "nf4", "--lora-ranks", "64"})["fitting"] == 0 &&
        fit(gpu, {"--allow", "nf4", "--lora-ranks", "16"})["fitting"] > 0) {
      cap = gpu;
    }
  }
  ASSERT_FALSE(cap.empty());
  const nlohmann::json smaller = fit(cap, {"--allow", "nf4", "--lora-ranks", "8,16,64", "--set",
                                           R"(model.lora={"r": 16, "alpha": 32, "target_modules": "all-linear"})"});
  ASSERT_GT(smaller["fitting"].get<int>(), 0);
  const nlohmann::json& second = smaller["configurations"][0];
  EXPECT_FALSE(has(second["changes"], "model.lora.r=8")) << second;
  EXPECT_FALSE(has(second["changes"], "model.lora.r=64")) << second;
  EXPECT_TRUE(parse_job_config(smaller["best_config"], 1).ok());
  const nlohmann::json down = fit(cap, {"--allow", "nf4", "--lora-ranks", "8", "--set",
                                        R"(model.lora={"r": 16, "alpha": 32, "target_modules": "all-linear"})"});
  EXPECT_TRUE(has(down["configurations"][0]["changes"], "model.lora.alpha=16.0")) << down["configurations"][0];
}

// zero-worker refusing a job past run.host_memory_limit says what --fit
// would change; run with those changes, the job trains under the same limit.
TEST_F(EstimateTest, AWorkerRefusalNamesWhatFitWouldChangeAndThatTrains) {
  nlohmann::json j = testing::tiny_job();
  j["run"]["steps"] = 2;
  const Result e = estimate({"--config", job(j), "--json"});
  ASSERT_EQ(e.code, 0) << e.err;
  const uint64_t host = nlohmann::json::parse(e.out)["per_rank"]["host"]["total"];
  j["run"]["host_memory_limit"] = host - 1;
  const std::string cfg = job(j);
  const testing::WorkerResult refused = testing::run_worker_with({"--config", cfg});
  EXPECT_EQ(refused.code, 2);
  const std::string marker = "that fit; the fastest by its cost model: ";
  const size_t at = refused.err.find(marker);
  ASSERT_NE(at, std::string::npos) << refused.err;
  std::vector<std::string> args = {"--config", cfg};
  std::istringstream advice(refused.err.substr(at + marker.size()));
  for (std::string word; advice >> word;) args.push_back(word);
  ASSERT_GT(args.size(), 2u);
  const testing::WorkerResult ran = testing::run_worker_with(args);
  EXPECT_EQ(ran.code, 0) << ran.err;
}

// A resume reads the saved shard into host buffers the plan states: the
// run's memory table equals its plan, resuming its own partition's files
// and (under MPI) another's, whose read buffers are the larger.
TEST_F(EstimateTest, AResumeReadsIntoBuffersThePlanStates) {
  nlohmann::json j = testing::tiny_job();
  j["run"]["steps"] = 2;
  j["run"]["checkpoint"] = {{"dir", path("ckpt")}, {"interval", 2}};
  j["run"]["resume"] = "latest";
  j["train_batch_size"] = 8;
  j["zero_optimization"] = {{"stage", 2}};
  const std::string cfg = job(j);
  auto resumed_summary = [&](const std::string& expected_resume) {
    const testing::WorkerResult w =
        testing::run_worker_with({"--config", cfg, "--set", "run.steps=3", "--log-format", "json"});
    EXPECT_EQ(w.code, 0) << w.err;
    const auto all = testing::events(w.out);
    const auto resume = testing::of_kind(all, "resume");
    EXPECT_EQ(resume.size(), 1u);
    if (!resume.empty()) {
      EXPECT_NE(resume[0]["path"].dump().find(expected_resume), std::string::npos) << resume[0];
    }
    const auto summary = testing::of_kind(all, "summary");
    return summary.empty() ? nlohmann::json() : summary[0];
  };
  const testing::WorkerResult saved = testing::run_worker_with({"--config", cfg});
  ASSERT_EQ(saved.code, 0) << saved.err;
  const nlohmann::json same = resumed_summary("step-00000002");
  EXPECT_EQ(same["memory_planned"], same["memory_peak"]);
#ifdef ZEROD_WITH_MPI
  std::filesystem::remove_all(path("ckpt"));
  const testing::CommandResult two = testing::mpirun(2, "--config " + cfg);
  ASSERT_EQ(two.code, 0) << two.out;
  const nlohmann::json other = resumed_summary("step-00000002");
  EXPECT_EQ(other["memory_planned"], other["memory_peak"]);
  // Reading another partition's files takes the optimizer states too.
  EXPECT_GT(other["memory_peak"]["host"]["workspace"].get<uint64_t>(),
            same["memory_peak"]["host"]["workspace"].get<uint64_t>());
#endif
}

// The process's peak resident memory (VmHWM) beyond the accountant's host
// and pinned peaks is a fixed overhead (the libraries, OpenBLAS's buffers,
// the synthetic task): the same within 16 MiB for gpt2-tiny and a model
// whose accounted memory is over 400 MiB more. Separate processes, so each
// VmHWM is its run's alone.
TEST_F(EstimateTest, ResidentMemoryPastTheAccountantDoesNotGrowWithTheModel) {
  auto unaccounted = [&](const nlohmann::json& model, uint64_t* accounted) {
    nlohmann::json j = testing::tiny_job();
    j["model"] = model;
    j["run"]["steps"] = 2;
    const testing::CommandResult r =
        testing::run_command(absl::StrCat(ZEROD_WORKER_BIN, " --config ", job(j), " --log-format json 2>&1"));
    EXPECT_EQ(r.code, 0) << r.out;
    const auto summary = testing::of_kind(testing::events(r.out), "summary");
    if (summary.empty()) return int64_t{0};
    *accounted = 0;
    for (const char* tier : {"host", "pinned"}) {
      for (const auto& [category, bytes] : summary[0]["memory_peak"][tier].items()) *accounted += bytes.get<uint64_t>();
    }
    return static_cast<int64_t>(summary[0]["resident_peak"].get<uint64_t>()) - static_cast<int64_t>(*accounted);
  };
  uint64_t small = 0, large = 0;
  const int64_t tiny = unaccounted({{"preset", "gpt2-tiny"}}, &small);
  const int64_t bigger = unaccounted(
      {{"preset", "custom"}, {"n_layer", 8}, {"n_head", 8}, {"n_embd", 512}, {"vocab_size", 256}, {"block_size", 64}},
      &large);
  EXPECT_GT(large, small + (uint64_t{400} << 20));
  EXPECT_GT(tiny, 0);
  EXPECT_LT(std::abs(bigger - tiny), int64_t{16} << 20) << "unaccounted: " << tiny << " and " << bigger << " bytes";
}

// The start-up check counts the NVMe files of every rank on the node
// against their directory's free space.
TEST_F(EstimateTest, StartUpCheckCountsTheNvmeFilesOfEveryRankOnTheNode) {
  const std::string dir = path("");
  JobConfig cfg = testing::config_with(
      testing::tiny_job(), {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=\"nvme\"",
                            "zero_optimization.offload_optimizer.nvme_path=" + nlohmann::json(dir).dump()});
  struct statvfs vfs;
  ASSERT_EQ(statvfs(dir.c_str(), &vfs), 0);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  MemoryPeaks p;
  p.peak[static_cast<int>(Tier::kNvme)][static_cast<int>(Category::kOptimizer)] = free_bytes / 10 * 3;
  p.total[static_cast<int>(Tier::kNvme)] = free_bytes / 10 * 3;
  EXPECT_TRUE(check_memory_plan(cfg, 0, 3, p, NodeMemory{}).ok());
  const absl::Status four = check_memory_plan(cfg, 0, 4, p, NodeMemory{});
  EXPECT_EQ(four.code(), absl::StatusCode::kFailedPrecondition) << four;
  for (const std::string& part : {std::string("zero_optimization.offload_optimizer.nvme_path: '") + dir,
                                  std::string("4 ranks on this node, each optimizer"), std::string(" more")}) {
    EXPECT_NE(four.message().find(part), std::string::npos) << four;
  }
}

// The host's limit holds its pinned memory too; without run.host_memory_limit
// a rank's share of the node's memory is the limit, and a job's own limit
// above the node's memory is taken as the job says.
TEST(StartUpCheck, HostMemoryIsPinnedAndPageableAgainstTheJobsLimitOrTheNodes) {
  JobConfig cfg = testing::config_with(testing::tiny_job(), {});
  MemoryPeaks p;
  auto hold = [&](Tier t, Category c, uint64_t bytes) {
    p.peak[static_cast<int>(t)][static_cast<int>(c)] = bytes;
    p.total[static_cast<int>(t)] = bytes;
  };
  hold(Tier::kHost, Category::kParams, 400);
  hold(Tier::kPinned, Category::kOptimizer, 101);
  hold(Tier::kGpu, Category::kActivations, 1 << 30);  // no GPU limit: not checked
  const NodeMemory node{1000, "physical memory"};

  cfg.run.host_memory_limit = 500;
  const absl::Status past = check_memory_plan(cfg, 1, 1, p, NodeMemory{});
  EXPECT_EQ(past.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(past.message(),
            "run.host_memory_limit is 500 bytes (500 B), but rank 1 would hold 501 bytes (501 B) of host memory "
            "(pinned included), 1 B more: params 400 B, optimizer 101 B; " +
                what_sets_the_size(cfg) + " (zeroctl estimate --buffers shows each buffer)");
  cfg.run.host_memory_limit = 501;
  EXPECT_TRUE(check_memory_plan(cfg, 1, 1, p, NodeMemory{}).ok());

  // The node's 1000 bytes shared by 2 ranks: 500 a rank.
  cfg.run.host_memory_limit.reset();
  const absl::Status node_past = check_memory_plan(cfg, 0, 2, p, node);
  EXPECT_EQ(node_past.code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(node_past.message());
  EXPECT_EQ(m.find("this node's memory (physical memory, 1000 B), shared by 2 ranks, gives a rank 500 bytes (500 B), "
                   "but rank 0 would hold 501 bytes"),
            0u)
      << m;
  EXPECT_NE(m.find("; run.host_memory_limit checks the plan against another figure"), std::string::npos) << m;
  EXPECT_EQ(host_memory_per_rank(cfg, 2, node), 500u);
  EXPECT_TRUE(check_memory_plan(cfg, 0, 1, p, node).ok());
  EXPECT_TRUE(check_memory_plan(cfg, 0, 2, p, NodeMemory{}).ok());  // nothing known: nothing checked
  cfg.run.host_memory_limit = 600;                                   // the job's word over the node's
  EXPECT_TRUE(check_memory_plan(cfg, 0, 2, p, node).ok());
  EXPECT_EQ(host_memory_per_rank(cfg, 2, node), 600u);
}

// A job past this machine's memory, with no run.host_memory_limit:
// zero-worker refuses it before anything is allocated, naming the node's
// memory and the bytes. Llama-3.1-70B with fp32 AdamW on the CPU plans about
// 1 TiB, past any machine this runs on.
TEST_F(EstimateTest, AWorkerRefusesAJobPastTheNodesMemory) {
  nlohmann::json j = testing::tiny_job();
  j["model"] = {{"preset", "llama-3.1-70b"}};
  j["run"]["device"] = "cpu";
  const testing::WorkerResult refused = testing::run_worker_with({"--config", job(j)});
  EXPECT_EQ(refused.code, 2) << refused.err;
  for (const char* part : {"this node's memory (", "gives a rank", "of host memory, ",
                           "optimizer", "run.host_memory_limit checks the plan against another figure"}) {
    EXPECT_NE(refused.err.find(part), std::string::npos) << part << "\n" << refused.err;
  }
  EXPECT_EQ(refused.out.find("step 1"), std::string::npos) << refused.out;
}

}  // namespace
}  // namespace zerod
