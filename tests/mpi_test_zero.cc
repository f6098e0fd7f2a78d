// ZeRO stages 0-3 on every rank of an mpirun world (and a world of one)
// against the single-process run of the same global batch, which each rank
// computes for itself with a local trainer.
//
// Not bitwise: the ranks' gradients are summed in a different order than
// one process accumulates them (its micro-batches one after another; here
// per rank, then across ranks by MPI), and float addition is not
// associative. The differences are rounding-sized in the gradients; Adam
// then moves every parameter by about lr per step whatever the gradient's
// size, so parameters whose gradient is near zero can take different signs
// of update. Hence: losses to a relative 1e-5, parameters to an absolute
// 2 * lr (a different batch moves them by far more, as checked below).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/config/job_config.h"
#include "runtime/engine/trainer.h"
#include "tests/mpi_world.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::world;

constexpr double kLr = 3e-3;

nlohmann::json tiny_job(int stage) {
  return {
      {"model", {{"preset", "gpt2-tiny"}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 32}, {"seed", 3}}},
      {"run", {{"steps", 20}, {"seed", 11}, {"device", "cpu"}}},
      // 24 sequences: 2 per micro-batch, 12 / world accumulation steps.
      {"train_batch_size", 24},
      {"train_micro_batch_size_per_gpu", 2},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
      {"zero_optimization",
       {{"stage", stage},
        // Small buckets and no persistent units, so every path of the
        // schedules runs on this small model.
        {"reduce_bucket_size", 20000},
        {"stage3_param_persistence_threshold", 0}}},
  };
}

JobConfig config(nlohmann::json j, int world_size, const std::vector<std::string>& overrides = {}) {
  return testing::config_with(std::move(j), overrides, world_size);
}

struct TrainRun {
  std::vector<double> losses, grad_norms;
  std::vector<float> params;
};

TrainRun train(const JobConfig& cfg, Communicator* comm) {
  TrainRun r;
  auto t = testing::make_trainer(cfg, comm);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return r;
  for (int64_t i = 0; i < cfg.run.steps; ++i) {
    auto s = (*t)->step();
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return r;
    r.losses.push_back(s->loss);
    r.grad_norms.push_back(s->grad_norm);
  }
  auto p = (*t)->master_params();
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) r.params = std::move(*p);
  return r;
}

// The same global batch in one process.
TrainRun reference(const std::vector<std::string>& overrides = {}) {
  return train(config(tiny_job(0), 1, overrides), nullptr);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

void expect_follows(const TrainRun& got, const TrainRun& want, double loss_rtol, double param_atol) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], loss_rtol * want.losses[i]) << "step " << i + 1;
  }
  EXPECT_LE(max_abs_diff(got.params, want.params), param_atol);
}

TEST(ZeroEquivalence, Fp32EveryStageFollowsTheSingleProcessRun) {
  const int n = world().world_size();
  const TrainRun ref = reference();
  // What counts as far: the run started from a different data seed.
  const TrainRun other = reference({"data.seed=4"});
  EXPECT_GT(max_abs_diff(other.params, ref.params), 20 * kLr);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n);
    expect_follows(train(config(tiny_job(stage), n), &world()), ref, 1e-5, 2 * kLr);
  }
  // Stage 3 with DeepSpeed's default threshold keeps this small model's
  // units gathered between updates; without prefetching, one layer at a time.
  for (const char* o : {"zero_optimization.stage3_param_persistence_threshold=100000",
                        "zero_optimization.stage3_prefetch_bucket_size=0"}) {
    SCOPED_TRACE(::testing::Message() << "stage 3, " << o << ", world " << n);
    expect_follows(train(config(tiny_job(3), n, {o}), &world()), ref, 1e-5, 2 * kLr);
  }
}

// A Llama (rotary positions, grouped-query attention, SwiGLU, RMSNorm, an
// untied head) through every stage as GPT-2 above, in fp32 and in bf16
// (tolerances as above and below).
TEST(ZeroEquivalence, LlamaEveryStageFollowsTheSingleProcessRun) {
  const int n = world().world_size();
  for (const char* flag : {"bf16.enabled=false", "bf16.enabled=true"}) {
    const std::vector<std::string> o = {"model.preset=llama-tiny", flag};
    const bool bf16 = o[1] == std::string("bf16.enabled=true");
    const TrainRun ref = reference(o);
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << "llama-tiny, " << flag << ", stage " << stage << ", world " << n);
      expect_follows(train(config(tiny_job(stage), n, o), &world()), ref, bf16 ? 2e-2 : 1e-5,
                     bf16 ? 10 * kLr : 2 * kLr);
    }
  }
}

// Instruction data, whose loss mask leaves each rank's windows with their
// own counts of targets: every stage follows the single-process run, the
// loss the mean over all the step's counted targets.
TEST(ZeroEquivalence, InstructionDataEveryStageFollowsTheSingleProcessRun) {
  const int n = world().world_size();
  const std::string data = ::testing::TempDir() + "/zerod_mpi_sft_" + std::to_string(getpid()) + ".bin";
  testing::write_instruction_shard(data, 48, 32, 0);
  const std::vector<std::string> o = {"model.preset=llama-tiny", "data.kind=\"tokens\"", "data.path=\"" + data + "\""};
  const TrainRun ref = reference(o);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "instruction data, stage " << stage << ", world " << n);
    expect_follows(train(config(tiny_job(stage), n, o), &world()), ref, 1e-5, 2 * kLr);
  }
  std::filesystem::remove(data);
}

// data.sources, two instruction shards by weight: the windows each batch
// draws are the same at every world size, so every stage follows the
// single-process run.
TEST(ZeroEquivalence, DataSourcesEveryStageFollowsTheSingleProcessRun) {
  const int n = world().world_size();
  const std::string base = ::testing::TempDir() + "/zerod_mpi_sources_" + std::to_string(getpid());
  testing::write_instruction_shard(base + "_a.bin", 48, 32, 0);
  testing::write_instruction_shard(base + "_b.bin", 7, 32, 1);
  const std::vector<std::string> o = {"model.preset=llama-tiny", "data.kind=\"tokens\"",
                                      "data.sources=[{\"path\": \"" + base + "_a.bin\", \"weight\": 2}, {\"path\": \"" +
                                          base + "_b.bin\", \"weight\": 1}]"};
  const TrainRun ref = reference(o);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "data.sources, stage " << stage << ", world " << n);
    expect_follows(train(config(tiny_job(stage), n, o), &world()), ref, 1e-5, 2 * kLr);
  }
  std::filesystem::remove(base + "_a.bin");
  std::filesystem::remove(base + "_b.bin");
}

// Packed instruction data (several documents a window, attention and
// positions per document), GPT-2 and Llama: every stage follows the
// single-process run.
TEST(ZeroEquivalence, PackedDataEveryStageFollowsTheSingleProcessRun) {
  const int n = world().world_size();
  const std::string data = ::testing::TempDir() + "/zerod_mpi_packed_" + std::to_string(getpid()) + ".bin";
  testing::write_packed_instruction_shard(data, 48, 32);
  for (const char* preset : {"model.preset=gpt2-tiny", "model.preset=llama-tiny"}) {
    const std::vector<std::string> o = {preset, "data.kind=\"tokens\"", "data.path=\"" + data + "\""};
    const TrainRun ref = reference(o);
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << "packed data, " << preset << ", stage " << stage << ", world " << n);
      expect_follows(train(config(tiny_job(stage), n, o), &world()), ref, 1e-5, 2 * kLr);
    }
  }
  std::filesystem::remove(data);
}

// The held-out loss (data.eval) before and after 5 steps, in one process.
std::pair<EvalResult, EvalResult> evaluations(const JobConfig& cfg, Communicator* comm) {
  auto t = testing::make_trainer(cfg, comm);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  const absl::StatusOr<EvalResult> before = (*t)->evaluate();
  EXPECT_TRUE(before.ok()) << before.status();
  for (int64_t i = 0; i < cfg.run.steps; ++i) EXPECT_TRUE((*t)->step().ok());
  const absl::StatusOr<EvalResult> after = (*t)->evaluate();
  EXPECT_TRUE(after.ok()) << after.status();
  return {before.value_or(EvalResult{}), after.value_or(EvalResult{})};
}

// The held-out loss at every stage and world size: a fraction of the
// synthetic task's windows, a windowed shard of its own beside packed
// training data, and a packed shard beside unpacked training data (the
// ranks score every world-th window, some none in the last pass). Before
// training every stage gives the same bits at a world size, and the single
// process's loss within 1e-6 (passes of other row counts round their fp32
// products otherwise: measured up to 5e-10); after, as the training losses
// follow it (1e-5); the targets are the same count.
TEST(ZeroEquivalence, EvalLossEveryStageFollowsTheSingleProcessRun) {
  const int n = world().world_size();
  const std::string dir = ::testing::TempDir() + "/zerod_mpi_eval_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  testing::write_packed_instruction_shard(dir + "/train.bin", 48, 32);
  testing::write_packed_instruction_shard(dir + "/packed.bin", 11, 32);
  testing::write_instruction_shard(dir + "/windowed.bin", 13, 32, 0);
  const std::vector<std::vector<std::string>> cases = {
      {"data.eval={\"fraction\": 0.15}"},
      {"model.preset=llama-tiny", "data.kind=\"tokens\"", "data.path=\"" + dir + "/train.bin\"",
       "data.eval={\"path\": \"" + dir + "/windowed.bin\"}"},
      {"data.eval={\"path\": \"" + dir + "/packed.bin\", \"kind\": \"tokens\"}"}};
  for (const std::vector<std::string>& c : cases) {
    const std::vector<std::string> o = testing::joined(c, {"run.steps=5"});
    const auto [ref_before, ref_after] = evaluations(config(tiny_job(0), 1, o), nullptr);
    ASSERT_GT(ref_before.targets, 0);
    double stage0 = 0;
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << c.back() << ", stage " << stage << ", world " << n);
      const auto [before, after] = evaluations(config(tiny_job(stage), n, o), &world());
      EXPECT_EQ(before.targets, ref_before.targets);
      EXPECT_EQ(after.targets, ref_after.targets);
      if (stage == 0) stage0 = before.loss;
      EXPECT_EQ(before.loss, stage0);
      EXPECT_NEAR(before.loss, ref_before.loss, 1e-6 * ref_before.loss);
      EXPECT_NEAR(after.loss, ref_after.loss, 1e-5 * ref_after.loss);
    }
  }
  ASSERT_TRUE(world().barrier()->wait().ok());
  if (world().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(ZeroEquivalence, MixedPrecisionFollowsTheSingleProcessRun) {
  // Every activation is rounded to 16 bits, so inputs that differ in the
  // last bit of fp32 can round to neighbouring 16-bit values (bf16 steps
  // are 2^-8 = 0.4% apart), and that compounds over the 20 steps (1.35% at
  // the last one, bf16 at world 3): losses within 2%, parameters within 10 lr.
  const int n = world().world_size();
  for (const char* flag : {"bf16.enabled=true", "fp16.enabled=true"}) {
    const TrainRun ref = reference({flag});
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << flag << ", stage " << stage << ", world " << n);
      expect_follows(train(config(tiny_job(stage), n, {flag}), &world()), ref, 2e-2, 10 * kLr);
    }
  }
}

TEST(ZeroEquivalence, AccumulationAndClippingUnderStages2And3) {
  // One sequence per micro-batch (24 / world accumulation steps) and a clip
  // low enough to act on every step.
  const int n = world().world_size();
  const std::vector<std::string> o = {"train_micro_batch_size_per_gpu=1", "gradient_clipping=0.05"};
  const TrainRun ref = reference(o);
  for (double g : ref.grad_norms) ASSERT_GT(g, 0.05) << "clipping must be active";
  for (int stage : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n);
    const TrainRun got = train(config(tiny_job(stage), n, o), &world());
    expect_follows(got, ref, 1e-5, 2 * kLr);
    for (size_t i = 0; i < ref.grad_norms.size(); ++i) {
      // Rounding-sized differences at first (~1e-8); clipping on every step
      // lets them grow (to ~1e-4 by step 20).
      const double tol = i < 10 ? 1e-6 : 1e-3;
      EXPECT_NEAR(got.grad_norms[i], ref.grad_norms[i], tol * ref.grad_norms[i]) << "step " << i + 1;
    }
  }
}

TEST(ZeroEquivalence, EightBitStatesUnderEveryStage) {
  // Quantization turns rounding-sized differences (summation order) into
  // code-sized ones when a value sits near a threshold, and at world sizes
  // above 1 a rank quantizes its own piece of each tensor, in blocks of 256
  // from the piece's start, so block boundaries differ from the single
  // process: losses within 1e-3, parameters within 10 lr.
  const int n = world().world_size();
  const TrainRun ref = reference({"optimizer.type=AdamW8bit"});
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n);
    expect_follows(train(config(tiny_job(stage), n, {"optimizer.type=AdamW8bit"}), &world()), ref, 1e-3, 10 * kLr);
  }
}

// LoRA: the adapters are what the stages shard (their embedding and final
// units empty), the base is frozen (replicated, or sharded and gathered at
// stage 3: in NF4 as packed layers), and the runs follow the single-process
// run as full training does.
TEST(ZeroEquivalence, LoraEveryStageFollowsTheSingleProcessRun) {
  const int n = world().world_size();
  for (const char* base : {"none", "nf4"}) {
    const std::vector<std::string> lora = {
        std::string(R"(model.lora={"r": 4, "alpha": 8, "target_modules": ["c_attn", "c_fc"], "base_quant": ")") + base +
        "\"}"};
    const TrainRun ref = reference(lora);
    ASSERT_EQ(ref.params.size(), 2u * 4 * (64 + 192 + 64 + 256));
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n << ", base " << base);
      expect_follows(train(config(tiny_job(stage), n, lora), &world()), ref, 1e-5, 2 * kLr);
    }
  }
  // A Llama's adapters on parts of fused products (q and v of q, k and v)
  // and on a whole one (down_proj), over an NF4 base.
  const std::vector<std::string> llama = {
      "model.preset=llama-tiny",
      R"(model.lora={"r": 4, "target_modules": ["q_proj", "v_proj", "down_proj"], "base_quant": "nf4"})"};
  const TrainRun ref = reference(llama);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "llama-tiny, stage " << stage << ", world " << n);
    expect_follows(train(config(tiny_job(stage), n, llama), &world()), ref, 1e-5, 2 * kLr);
  }
}

TEST(ZeroEquivalence, SameStageAndWorldTwiceIsBitwise) {
  const int n = world().world_size();
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n);
    const JobConfig cfg = config(tiny_job(stage), n, {"run.steps=8"});
    const TrainRun a = train(cfg, &world()), b = train(cfg, &world());
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.params, b.params);
  }
}

// Optimizer states streamed through a file per rank (offload_optimizer
// nvme, a dozen sub-groups through three buffers) change nothing: the run is
// bitwise the in-memory one at the same world size.
TEST(ZeroOffload, NvmeOptimizerIsBitwiseTheInMemoryRun) {
  const int n = world().world_size();
  const std::vector<std::string> swap = {
      "zero_optimization.offload_optimizer.device=\"nvme\"",
      "zero_optimization.offload_optimizer.nvme_path=\"" + ::testing::TempDir() + "\"",
      "zero_optimization.offload_optimizer.buffer_count=3", "zero_optimization.sub_group_size=10000",
      "aio.block_size=16384"};
  const std::vector<std::vector<std::string>> variants = {
      {"run.steps=6", "bf16.enabled=true"},
      {"run.steps=6", "optimizer.type=AdamW8bit"},
      {"run.steps=6", "model.preset=llama-tiny", "bf16.enabled=true"}};
  for (int stage : {1, 3}) {
    for (const auto& v : variants) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n << ", " << v[1]);
      const TrainRun mem = train(config(tiny_job(stage), n, v), &world());
      auto o = v;
      o.insert(o.end(), swap.begin(), swap.end());
      const TrainRun nvme = train(config(tiny_job(stage), n, o), &world());
      ASSERT_EQ(mem.losses.size(), 6u);
      EXPECT_EQ(nvme.losses, mem.losses);
      EXPECT_EQ(nvme.params, mem.params);
    }
  }
}

// offload_param: each rank's stage 3 shard in host memory or in its own
// file, gathered from the window; the same world size without offload is
// followed bitwise.
TEST(ZeroOffload, ParamsOffloadedAreBitwiseTheInMemoryRun) {
  const int n = world().world_size();
  const std::string dir = ::testing::TempDir();
  auto params_on = [&](const std::string& device, int buffers) {
    return std::vector<std::string>{"zero_optimization.offload_param.device=\"" + device + "\"",
                                    "zero_optimization.offload_param.nvme_path=\"" + dir + "\"",
                                    "zero_optimization.offload_param.buffer_count=" + std::to_string(buffers),
                                    "aio.block_size=16384"};
  };
  auto optimizer_on_nvme = params_on("nvme", 2);
  optimizer_on_nvme.insert(optimizer_on_nvme.end(), {"zero_optimization.offload_optimizer.device=\"nvme\"",
                                                     "zero_optimization.offload_optimizer.nvme_path=\"" + dir + "\"",
                                                     "zero_optimization.sub_group_size=10000"});
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"run.steps=6", "bf16.enabled=true"}, params_on("cpu", 5)},
      {{"run.steps=6", "bf16.enabled=true", "model.preset=llama-tiny"}, params_on("cpu", 5)},
      {{"run.steps=6", "bf16.enabled=true"}, params_on("nvme", 1)},
      {{"run.steps=6", "optimizer.type=AdamW8bit"}, optimizer_on_nvme},
      // LoRA's adapters and its frozen base, both offloaded; the base's
      // packed NF4 layers in host memory.
      {{"run.steps=6", "bf16.enabled=true", R"(model.lora={"r": 4, "target_modules": ["c_attn", "mlp.c_proj"]})"},
       optimizer_on_nvme},
      {{"run.steps=6", "bf16.enabled=true", R"(model.lora={"r": 4, "base_quant": "nf4"})"}, params_on("cpu", 2)},
      {{"run.steps=6", "bf16.enabled=true", "model.preset=llama-tiny", R"(model.lora={"r": 4, "base_quant": "nf4"})"},
       params_on("cpu", 2)},
  };
  for (const auto& [v, off] : cases) {
    SCOPED_TRACE(::testing::Message() << "world " << n << ", " << v.back() << ", " << off[0]);
    const TrainRun mem = train(config(tiny_job(3), n, v), &world());
    auto o = v;
    o.insert(o.end(), off.begin(), off.end());
    const TrainRun offloaded = train(config(tiny_job(3), n, o), &world());
    ASSERT_EQ(mem.losses.size(), 6u);
    EXPECT_EQ(offloaded.losses, mem.losses);
    EXPECT_EQ(offloaded.params, mem.params);
  }
}

TEST(ZeroMemory, PerRankBytesFollowThePartition) {
  // Shard size from the definition: every unit's ceil(numel / N) elements,
  // rounded up to 64.
  const int n = world().world_size();
  const JobConfig base = config(tiny_job(0), n);
  const GptLayout layout(base.model);
  int64_t shard = 0, padded = 0, padded1 = 0, owned = 0;
  std::vector<int64_t> unit_padded;
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t per = (layout.unit_numel(u) + n - 1) / n;
    const int64_t chunk = (per + 63) / 64 * 64;
    shard += chunk;
    // The real elements of this rank's chunk (the optimizer keeps no state for padding).
    owned += std::clamp<int64_t>(layout.unit_numel(u) - world().rank() * chunk, 0, chunk);
    padded += chunk * n;
    padded1 += (layout.unit_numel(u) + 63) / 64 * 64;
    unit_padded.push_back(chunk * n);
  }
  const int64_t total = layout.num_params();
  // About total / N: at most one alignment block per unit more.
  EXPECT_LT(shard - total / n, 64 * layout.num_units() + 1);
  const MemoryAccountant& acct = MemoryAccountant::global();
  auto bytes = [&](Category c) { return static_cast<int64_t>(acct.current(Tier::kHost, c)); };
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << n);
    auto t = testing::make_trainer(config(tiny_job(stage), n), &world());
    ASSERT_TRUE(t.ok()) << t.status();
    switch (stage) {
      case 0:  // replicated; the fp32 parameters are the master weights
        EXPECT_EQ(bytes(Category::kParams), padded1 * 4);
        EXPECT_EQ(bytes(Category::kGrads), padded1 * 4);
        EXPECT_EQ(bytes(Category::kOptimizer), 2 * total * 4);
        break;
      case 1:  // m, v sharded (the rank's own fp32 parameters are its master
               // weights); full gradients plus the reduced shard
        EXPECT_EQ(bytes(Category::kParams), padded * 4);
        EXPECT_EQ(bytes(Category::kGrads), (padded + shard) * 4);
        EXPECT_EQ(bytes(Category::kOptimizer), 2 * owned * 4);
        break;
      case 2:  // gradients sharded too; per-layer staging is comm memory
        EXPECT_EQ(bytes(Category::kParams), padded * 4);
        EXPECT_EQ(bytes(Category::kGrads), shard * 4);
        EXPECT_EQ(bytes(Category::kOptimizer), 2 * owned * 4);
        EXPECT_GT(bytes(Category::kComm), 0);
        break;
      case 3: {  // parameters sharded; the live window is two layers and the globals
        const int64_t window = 2 * unit_padded[1] + unit_padded[0] + unit_padded[layout.final_unit()];
        EXPECT_EQ(bytes(Category::kParams), (shard + window) * 4);
        EXPECT_EQ(bytes(Category::kGrads), shard * 4);
        EXPECT_EQ(bytes(Category::kOptimizer), 2 * owned * 4);
        break;
      }
    }
  }
}

}  // namespace
}  // namespace zerod
