// Offload with the CPU device standing in for a GPU (CpuDeviceOptions
// gpu_tier): its memory is the gpu tier, reached only through copies, and
// its streams run on threads with random delays. What a GPU run keeps on
// the GPU and what offload moves to the host is measured here, in CI:
//   - offload none, cpu and nvme, and stage 3's parameters on cpu or nvme,
//     give bitwise the run of the plain CPU device;
//   - offloaded optimizer states and gradients leave the GPU, and offloaded
//     parameters leave it the gathered units only;
//   - a GPU cap the model does not fit under refuses the run without
//     offload, and the offloaded run trains under it with the same bits;
//   - units whose sums are on the GPU are updated there, their masters
//     and states copied up and back in parts, with the host's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "runtime/core/caching_allocator.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/pinned_host.h"
#include "runtime/engine/micro_batch_grads.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/gpt_layout.h"
#include "shard/device_steps.h"
#include "shard/partition.h"
#include "shard/saved_shards.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

CpuDeviceOptions gpu_tier() {
  CpuDeviceOptions o;
  o.threaded = true;
  o.gpu_tier = true;
  return o;
}

class GpuTierOffloadTest : public testing::TempDirTest {
 protected:
  JobConfig config(const std::vector<std::string>& overrides) const { return testing::offload_job(overrides); }
  std::vector<std::string> optimizer_on(const std::string& device) const {
    return testing::optimizer_on(device, dir_.string());
  }
  std::vector<std::string> params_on(const std::string& device) const {
    return testing::params_on(device, dir_.string());
  }
  // `overrides` trained on the plain CPU device: the bits every offload gives.
  testing::TrainedRun plain_cpu_run(const std::vector<std::string>& overrides) const {
    MemoryAccountant acct;
    CpuDevice cpu(acct);
    return testing::train_to_end(config(overrides), nullptr, cpu);
  }
};

using testing::joined;

std::string micro_batch_grads(const std::string& mode) {
  return "zero_optimization.micro_batch_grads=\"" + mode + "\"";
}

// Trains `cfg` to its end on a stand-in GPU counted by `acct`: ref's losses
// and masters, bit for bit.
void expect_trains_as(const JobConfig& cfg, const testing::TrainedRun& ref, MemoryAccountant& acct) {
  CpuDevice gpu(acct, gpu_tier());
  const testing::TrainedRun r = testing::train_to_end(cfg, nullptr, gpu);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.losses, ref.losses);
  EXPECT_TRUE(testing::same_bits(r.params, ref.params));
}

TEST_F(GpuTierOffloadTest, EveryOffloadGivesTheBitsOfThePlainCpuRun) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    const std::vector<std::string> base = {"zero_optimization.stage=" + std::to_string(stage)};
    const testing::TrainedRun ref = plain_cpu_run(base);
    ASSERT_TRUE(ref.status.ok()) << ref.status;
    std::vector<std::vector<std::string>> variants = {base, joined(base, optimizer_on("cpu")),
                                                      joined(base, optimizer_on("nvme"))};
    if (stage == 3) {
      variants.push_back(joined(base, params_on("cpu")));
      variants.push_back(joined(joined(base, params_on("nvme")), optimizer_on("nvme")));
      variants.push_back(joined(joined(base, params_on("cpu")), optimizer_on("cpu")));
    }
    for (const auto& v : variants) {
      std::string name;
      for (const auto& o : v) name += o + " ";
      SCOPED_TRACE(name);
      MemoryAccountant acct;
      expect_trains_as(config(v), ref, acct);
    }
  }
}

// With the optimizer on the host each unit is updated on the host thread as
// soon as the last micro-batch's backward has reduced it, while backward
// goes on over the earlier layers, with the factor of a step that neither
// clips nor overflows. With the states on NVMe the unit's sub-groups are
// read, updated and written back then, the next unit's read ahead. Without
// clipping or fp16 that factor is the step's; with them the update waits
// for the norm, unless super_offload is set: then each unit's masters and
// states are kept before its update (copied aside in memory, or the new
// records written to their second place in the file), and a step that
// clips or overflows puts them back (and updates again, or skips). Behind
// the threaded, delayed streams every case gives the bits of the plain CPU
// device's ordered update.
TEST_F(GpuTierOffloadTest, TheHostUpdatesEachUnitDuringTheLastBackwardWithTheSameBits) {
  const std::string super = "zero_optimization.offload_optimizer.super_offload=true";
  // fp16 from a scale that overflows at first (and once more at step 6).
  const std::vector<std::string> fp16 = {"bf16.enabled=false", "fp16.enabled=true", "fp16.initial_scale_power=24",
                                         "fp16.hysteresis=1"};
  const std::vector<std::string> wide = {"model.preset=\"custom\"", "model.n_layer=2",      "model.n_embd=256",
                                         "model.n_head=4",          "model.vocab_size=256", "model.block_size=32"};
  auto buffers = [](int n) { return "zero_optimization.offload_optimizer.buffer_count=" + std::to_string(n); };
  struct Case {
    std::vector<std::string> overrides;
    std::string device;  // of the optimizer
    bool during_backward;
  };
  const std::vector<Case> cases = {
      {{"zero_optimization.stage=2", "gradient_clipping=0"}, "cpu", true},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0"}, "cpu", false},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0", super}, "cpu", true},
      {{"zero_optimization.stage=3", "gradient_clipping=0"}, "cpu", true},
      {{"zero_optimization.stage=3", "gradient_clipping=3.0", super}, "cpu", true},
      {joined({"zero_optimization.stage=2", "gradient_clipping=0", super}, fp16), "cpu", true},
      {joined({"zero_optimization.stage=3", "gradient_clipping=3.0", super}, fp16), "cpu", true},
      {joined({"zero_optimization.stage=2", "gradient_clipping=3.0"}, fp16), "cpu", false},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0", "optimizer.type=\"AdamW8bit\"", super}, "cpu", true},
      // Sub-groups of 20000: a layer is several, in one to four buffers.
      {{"zero_optimization.stage=2", "gradient_clipping=0"}, "nvme", true},
      {{"zero_optimization.stage=2", "gradient_clipping=0", buffers(1)}, "nvme", true},
      {{"zero_optimization.stage=3", "gradient_clipping=0", "optimizer.type=\"AdamW8bit\"", buffers(2)}, "nvme", true},
      {{"zero_optimization.stage=3", "gradient_clipping=3.0"}, "nvme", false},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0", super}, "nvme", true},
      {{"zero_optimization.stage=3", "gradient_clipping=3.0", super, buffers(1)}, "nvme", true},
      {joined({"zero_optimization.stage=3", "gradient_clipping=3.0", super}, fp16), "nvme", true},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0", "optimizer.type=\"AdamW8bit\"", super, buffers(2)},
       "nvme",
       true},
      // The parameters offloaded too: each unit's new values written to
      // their store by the host thread while backward reads others.
      {joined({"zero_optimization.stage=3", "gradient_clipping=0"}, params_on("cpu")), "cpu", true},
      {joined({"zero_optimization.stage=3", "gradient_clipping=0"}, params_on("nvme")), "nvme", true},
      {joined({"zero_optimization.stage=3", "gradient_clipping=3.0", super}, params_on("nvme")), "cpu", true},
      {joined(joined({"zero_optimization.stage=3", "gradient_clipping=3.0", super}, fp16), params_on("cpu")), "nvme",
       true},
      // Layers of 786K elements, copied to the host in two parts.
      {joined({"zero_optimization.stage=2", "gradient_clipping=0"}, wide), "cpu", true},
      {joined({"zero_optimization.stage=3", "gradient_clipping=0"}, wide), "nvme", true},
      {joined(joined({"zero_optimization.stage=3", "gradient_clipping=0"}, wide), params_on("nvme")), "nvme", true},
  };
  for (const Case& c : cases) {
    std::string name = c.device + ": ";
    for (const std::string& o : c.overrides) name += o + " ";
    SCOPED_TRACE(name);
    const std::vector<std::string> base = joined(c.overrides, {"run.steps=6"});
    std::vector<std::string> plain = base;
    std::erase(plain, super);
    std::erase_if(plain, [](const std::string& k) { return k.starts_with("zero_optimization.offload_param"); });
    MemoryAccountant cpu_acct;
    CpuDevice cpu(cpu_acct);
    const testing::TrainedRun ref = testing::train_to_end(config(plain), nullptr, cpu);
    ASSERT_TRUE(ref.status.ok()) << ref.status;

    MemoryAccountant acct;
    CpuDevice gpu(acct, gpu_tier());
    const JobConfig offloaded = config(joined(base, optimizer_on(c.device)));
    auto t = Trainer::create(offloaded, nullptr, &gpu);
    ASSERT_TRUE(t.ok()) << t.status();
    std::vector<double> losses;
    int64_t changed = 0;  // steps whose factor is not the one assumed during backward
    for (int64_t i = 0; i < offloaded.run.steps; ++i) {
      auto r = (*t)->step();
      ASSERT_TRUE(r.ok()) << r.status();
      losses.push_back(r->loss);
      const bool clipped = offloaded.gradient_clipping > 0 && offloaded.gradient_clipping / (r->grad_norm + 1e-6) < 1;
      changed += r->skipped || clipped;
    }
    auto params = (*t)->master_params();
    ASSERT_TRUE(params.ok()) << params.status();
    EXPECT_EQ(losses, ref.losses);
    EXPECT_TRUE(testing::same_bits(*params, ref.params));
    const int units = GptLayout(offloaded.model).num_units();
    EXPECT_EQ((*t)->zero().units_updated_in_backward(), c.during_backward ? offloaded.run.steps * units : 0);
    EXPECT_EQ((*t)->zero().updates_undone(), c.during_backward ? changed : 0);
    if (std::ranges::count(c.overrides, super)) {
      // Clipping at 3 and the fp16 scale make some steps stand and undo others.
      EXPECT_GT(changed, 0);
      EXPECT_LT(changed, offloaded.run.steps);
    }
  }
}

// micro_batch_grads "compute": each micro-batch's reduced gradients leave
// the GPU rounded to bf16 (or fp16), converted on the device, and are
// summed in fp32 on the host, in memory or in a file, whatever else is
// offloaded and whether the host updates during backward: bitwise the
// in-memory run that rounds them the same way before it adds them, which
// is not the run that adds them as they are. With fp32 parameters
// "compute" sends each micro-batch's fp32 gradients: bitwise the plain
// run. Layers of 1.2M elements go in two parts of 1M 16-bit values.
// Behind the threaded, delayed streams, with one reduction buffer or
// several. The same with the first half of the sum's bytes kept on the
// GPU (what "auto" does under a cap with room): those layers' rounded
// micro-batches are summed there and sent once, landing in host memory or
// in parts to a file, the others sent each; the same bits.
TEST_F(GpuTierOffloadTest, MicroBatchGradientsSentIn16BitsGiveTheBitsOfTheSameSumInMemory) {
  const std::string compute = micro_batch_grads("compute");
  const std::string super = "zero_optimization.offload_optimizer.super_offload=true";
  const std::vector<std::string> fp16 = {"bf16.enabled=false", "fp16.enabled=true", "fp16.initial_scale_power=12"};
  const std::vector<std::string> wide = {"model.preset=\"custom\"", "model.n_layer=2",      "model.n_embd=320",
                                         "model.n_head=4",          "model.vocab_size=256", "model.block_size=32"};
  struct Case {
    std::vector<std::string> overrides;
    std::vector<std::string> offload;
  };
  const std::vector<Case> cases = {
      {{"zero_optimization.stage=2", "gradient_clipping=0"}, optimizer_on("cpu")},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0"}, optimizer_on("nvme")},
      {{"zero_optimization.stage=3", "gradient_clipping=0"}, joined(optimizer_on("nvme"), params_on("cpu"))},
      {{"zero_optimization.stage=3", "gradient_clipping=3.0", super}, joined(optimizer_on("cpu"), params_on("nvme"))},
      {joined({"zero_optimization.stage=2", "gradient_clipping=3.0", super}, fp16), optimizer_on("cpu")},
      {joined({"zero_optimization.stage=2", "gradient_clipping=0"}, wide), optimizer_on("cpu")},
      {joined({"zero_optimization.stage=3", "gradient_clipping=0"}, wide), optimizer_on("nvme")},
      {{"zero_optimization.stage=2", "bf16.enabled=false"}, optimizer_on("cpu")},
      // One reduce-scatter buffer: each reduction into it waits for the
      // sender's reads of the last (its conversion, or its fp32 copies).
      {{"zero_optimization.stage=2", "zero_optimization.overlap_comm=false"}, optimizer_on("cpu")},
      {{"zero_optimization.stage=3", "zero_optimization.overlap_comm=false", "bf16.enabled=false"},
       optimizer_on("nvme")},
  };
  for (const Case& c : cases) {
    std::string name;
    for (const std::string& o : joined(c.overrides, c.offload)) name += o + " ";
    SCOPED_TRACE(name);
    std::vector<std::string> in_memory = c.overrides;
    std::erase(in_memory, super);
    MemoryAccountant cpu_acct;
    CpuDevice cpu(cpu_acct);
    const testing::TrainedRun ref = testing::train_to_end(config(joined(in_memory, {compute})), nullptr, cpu);
    ASSERT_TRUE(ref.status.ok()) << ref.status;
    const testing::TrainedRun unrounded = testing::train_to_end(config(in_memory), nullptr, cpu);
    ASSERT_TRUE(unrounded.status.ok()) << unrounded.status;
    const bool rounds = config(in_memory).precision != DType::kF32;
    EXPECT_EQ(testing::same_bits(ref.params, unrounded.params), !rounds);

    JobConfig offloaded = config(joined(joined(c.overrides, c.offload), {compute}));
    const Partition part(GptLayout(offloaded.model), 1);
    for (const uint64_t kept : {uint64_t{0}, static_cast<uint64_t>(part.shard_numel()) * 2}) {
      SCOPED_TRACE(::testing::Message() << kept << " bytes of the sum on the GPU");
      offloaded.zero.compute_sums_on_device_bytes = kept;
      MemoryAccountant acct;
      expect_trains_as(offloaded, ref, acct);
      // Some units' sums on the GPU, not all, where any.
      const int units = MicroBatchSums{2, DType::kBF16, kept}.device_units(part);
      EXPECT_EQ(units == 0, kept == 0);
      EXPECT_LT(units, part.num_units());
      EXPECT_EQ(acct.peak(Tier::kGpu, Category::kGrads) > 0, units > 0 && offloaded.grad_accum > 1);
    }
  }
}

// micro_batch_grads "auto" with the optimizer offloaded and two
// micro-batches a step: the step's sum stays on the GPU where every plan
// with it fits run.gpu_memory_limit; where it does not, each micro-batch
// goes to the host in 16 bits, saying why, but for the first units whose
// sums fit what the cap leaves (the next unit's would not; none where the
// first's does not; a twentieth of the GPU left free where its own size is
// the limit; the same where another rank's GPU decides); the run then
// trains under the cap with the bits of "compute".
TEST_F(GpuTierOffloadTest, AutoSendsEachMicroBatchIn16BitsWhereTheSumDoesNotFitTheCap) {
  const std::vector<std::string> base = joined({"zero_optimization.stage=2"}, optimizer_on("cpu"));
  MemoryAccountant probe_acct;
  CpuDevice probe(probe_acct, gpu_tier());
  const KernelMemory kernels = kernel_memory_for(probe);
  auto peak = [&](const std::string& mode) {
    MemoryPlan plan(plan_device(probe));
    EXPECT_TRUE(Trainer::plan(config(joined(base, {micro_batch_grads(mode)})), 1, 0, kernels, plan).ok());
    return plan.peaks().total[static_cast<int>(Tier::kGpu)];
  };
  const uint64_t summed = peak("fp32"), sent = peak("compute");
  ASSERT_LT(sent, summed);
  auto choice = [&](std::optional<uint64_t> cap) {
    JobConfig cfg = config(base);
    cfg.run.gpu_memory_limit = cap;
    auto c = resolve_micro_batch_grads(cfg, 1, kernels, plan_device(probe));
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  };
  const MicroBatchGradsChoice uncapped = choice(std::nullopt), fits = choice(summed),
                              over = choice((summed + sent) / 2);
  EXPECT_EQ(uncapped.mode, MicroBatchGrads::kF32);
  EXPECT_EQ(uncapped.what, "summed in fp32 on the device, sent to the host once a step");
  EXPECT_EQ(fits.mode, MicroBatchGrads::kF32);
  EXPECT_NE(fits.why.find("within run.gpu_memory_limit"), std::string::npos) << fits.why;
  EXPECT_EQ(over.mode, MicroBatchGrads::kCompute);
  EXPECT_EQ(over.what,
            "each micro-batch's rounded to bf16; the first units' (the embeddings, then layers) fp32 sums "
            "that fit in " +
                byte_size_text(over.sums_on_device_bytes) +
                " summed on the device, sent to the host once a step; the others' sent to the host in "
                "bf16, summed there in fp32, 2 micro-batches a pass");
  EXPECT_EQ(over.host_fold, 2);  // both of a step's, with the host's memory to spare
  {
    // Within the cap, and one layer more would not be.
    JobConfig resolved = config(base);
    over.apply(resolved.zero);
    const Partition part(GptLayout(resolved.model), 1);
    const int units = MicroBatchSums{2, DType::kBF16, over.sums_on_device_bytes}.device_units(part);
    ASSERT_GT(units, 0);
    ASSERT_LT(units, part.num_units());
    auto planned = [&](uint64_t kept) {
      resolved.zero.compute_sums_on_device_bytes = kept;
      MemoryPlan plan(plan_device(probe));
      EXPECT_TRUE(Trainer::plan(resolved, 1, 0, kernels, plan).ok());
      return plan.peaks().total[static_cast<int>(Tier::kGpu)];
    };
    EXPECT_LE(planned(over.sums_on_device_bytes), (summed + sent) / 2);
    EXPECT_GT(planned(static_cast<uint64_t>(part.shard_offset(units + 1)) * 4), (summed + sent) / 2);
  }
  // No room beside "compute"'s own plan, or less than the first unit's
  // sum: every micro-batch is sent.
  const Partition part(GptLayout(config(base).model), 1);
  for (const uint64_t room : {uint64_t{0}, static_cast<uint64_t>(part.shard_offset(1)) * 2}) {
    const MicroBatchGradsChoice full = choice(sent + room);
    EXPECT_EQ(full.mode, MicroBatchGrads::kCompute);
    EXPECT_EQ(full.sums_on_device_bytes, 0u) << room;
    EXPECT_EQ(full.what, "each micro-batch's sent to the host in bf16, summed there in fp32, 2 micro-batches a pass");
  }
  {
    // The GPU's own size as the limit: a twentieth of it stays free.
    PlanDevice gpu = plan_device(probe);
    gpu.usable_bytes = (summed + sent) / 2;
    auto own = resolve_micro_batch_grads(config(base), 1, kernels, gpu);
    ASSERT_TRUE(own.ok()) << own.status();
    EXPECT_EQ(own->mode, MicroBatchGrads::kCompute);
    ASSERT_GT(own->sums_on_device_bytes, 0u);
    JobConfig resolved = config(base);
    own->apply(resolved.zero);
    MemoryPlan plan(gpu);
    ASSERT_TRUE(Trainer::plan(resolved, 1, 0, kernels, plan).ok());
    EXPECT_LE(plan.peaks().total[static_cast<int>(Tier::kGpu)], gpu.usable_bytes - gpu.usable_bytes / 20);
    EXPECT_LT(own->sums_on_device_bytes, over.sums_on_device_bytes);
  }
  {
    // "compute" because another rank's GPU needs it: the same room.
    JobConfig capped = config(base);
    capped.run.gpu_memory_limit = (summed + sent) / 2;
    auto forced =
        choose_compute_grads(capped, 1, kernels, plan_device(probe), Trainer::ResumeFrom::kNothing, "another rank");
    ASSERT_TRUE(forced.ok()) << forced.status();
    EXPECT_EQ(forced->mode, MicroBatchGrads::kCompute);
    EXPECT_EQ(forced->sums_on_device_bytes, over.sums_on_device_bytes);
    EXPECT_EQ(forced->why, "another rank");
  }
  EXPECT_NE(over.why.find("the step's gradient sum on the GPU (" +
                          byte_size_text(CachingAllocator::block_size(
                              Partition(GptLayout(config(base).model), 1).shard_numel() * 4)) +
                          ") takes a rank to " + byte_size_text(summed) + ", over run.gpu_memory_limit"),
            std::string::npos)
      << over.why;
  // Given, it is not decided.
  JobConfig given = config(joined(base, {micro_batch_grads("fp32")}));
  given.run.gpu_memory_limit = (summed + sent) / 2;
  auto kept = resolve_micro_batch_grads(given, 1, kernels, plan_device(probe));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->mode, MicroBatchGrads::kF32);
  EXPECT_EQ(kept->why, "");

  MemoryAccountant ref_acct;
  CpuDevice ref_gpu(ref_acct, gpu_tier());
  const testing::TrainedRun ref =
      testing::train_to_end(config(joined(base, {micro_batch_grads("compute")})), nullptr, ref_gpu);
  ASSERT_TRUE(ref.status.ok()) << ref.status;
  JobConfig capped = config(base);
  capped.run.gpu_memory_limit = (summed + sent) / 2;
  MemoryAccountant acct;
  acct.set_limit(Tier::kGpu, *capped.run.gpu_memory_limit);
  CpuDevice gpu(acct, gpu_tier());
  auto t = Trainer::create(capped, nullptr, &gpu);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->config().zero.micro_batch_grads, MicroBatchGrads::kCompute);
  std::vector<double> losses;
  for (int64_t i = 0; i < capped.run.steps; ++i) {
    auto r = (*t)->step();
    ASSERT_TRUE(r.ok()) << r.status();
    losses.push_back(r->loss);
  }
  EXPECT_EQ(losses, ref.losses);
  EXPECT_LE(acct.peak_total(Tier::kGpu), *capped.run.gpu_memory_limit);
  EXPECT_GT(acct.peak(Tier::kGpu, Category::kGrads), 0u);  // the first units' sums
}

// At stage 2 with the optimizer on the host, the GPU holds no optimizer
// state: the masters, m and v (12 bytes a parameter) and the fp32 gradient
// shard (4) are in host memory. Of the gradients, the GPU keeps the step's
// sum of its two micro-batches, sent to the host once (micro_batch_grads
// "fp32", what "auto" is without a cap), or nothing, each micro-batch's
// sent in bf16 ("compute"). At stage 3 with the parameters on the host
// too, the GPU's parameters are the gathered units only: two layer slots,
// the embeddings and the final LayerNorm. Without offload, a world of one
// keeps no reduced copy of its gradients.
// zero_optimization.accumulation "auto" on a GPU: layer by layer where
// each micro-batch would upload every layer again (2 x 3 extra fetches of
// the bf16 weights saved), with the block inputs on the GPU where they fit
// the cap, else in pinned host memory where what they then move is less
// than what is saved, else micro-batch by micro-batch, each saying why;
// and the run "auto" chose is the "layer" run, bit for bit.
TEST_F(GpuTierOffloadTest, AutoGoesLayerByLayerWhereItMovesLessAndFits) {
  const std::vector<std::string> base = joined(
      {"zero_optimization.stage=3", "gradient_accumulation_steps=4", "activation_checkpointing.enabled=true",
       "zero_optimization.accumulation=\"auto\""},
      params_on("cpu"));
  MemoryAccountant probe_acct;
  CpuDevice probe(probe_acct, gpu_tier());
  const KernelMemory kernels = kernel_memory_for(probe);
  const auto choice = [&](JobConfig cfg, std::optional<uint64_t> cap) {
    cfg.run.gpu_memory_limit = cap;
    auto c = resolve_accumulation(cfg, 1, kernels, plan_device(probe));
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  };
  const auto gpu_peak = [&](const std::vector<std::string>& more) {
    MemoryPlan plan(plan_device(probe));
    EXPECT_TRUE(Trainer::plan(config(joined(base, more)), 1, 0, kernels, plan).ok());
    return plan.peaks().total[static_cast<int>(Tier::kGpu)];
  };
  const JobConfig cfg = config(base);
  const uint64_t saved = 2 * 3 * uint64_t(gpt_param_count(cfg.model)) * 2;
  const std::string uploads = "each micro-batch uploads every layer again: layer by layer moves " +
                              byte_size_text(saved) + " less a step";
  const uint64_t on_gpu = gpu_peak({"zero_optimization.accumulation=\"layer\""}),
                 on_host = gpu_peak({"zero_optimization.accumulation=\"layer\"",
                                     "activation_checkpointing.cpu_checkpointing=true"});
  ASSERT_LT(on_host, on_gpu);

  const AccumulationChoice uncapped = choice(cfg, std::nullopt), fits = choice(cfg, on_gpu);
  EXPECT_EQ(uncapped.mode, Accumulation::kLayer);
  EXPECT_EQ(uncapped.why, uploads);
  EXPECT_EQ(fits.mode, Accumulation::kLayer);
  EXPECT_FALSE(fits.checkpoints_on_host);
  EXPECT_EQ(fits.why, uploads + "; the 4 micro-batches' block inputs take a rank to " + byte_size_text(on_gpu) +
                          ", within run.gpu_memory_limit " + byte_size_text(on_gpu));
  // The block inputs of 4 micro-batches of 4 x 32 tokens, 5 layers' of 64
  // bf16 values, cross the link 3 times: 0.5 MiB, far less than saved.
  const AccumulationChoice hosted = choice(cfg, on_gpu - 1);
  EXPECT_EQ(hosted.mode, Accumulation::kLayer);
  EXPECT_TRUE(hosted.checkpoints_on_host);
  EXPECT_NE(hosted.why.find("in pinned host memory, moving " + byte_size_text(3 * 4 * 5 * 4 * 32 * 64 * 2)),
            std::string::npos)
      << hosted.why;
  const AccumulationChoice over = choice(cfg, on_host - 1);
  EXPECT_EQ(over.mode, Accumulation::kMicroBatch);
  EXPECT_NE(over.why.find(uploads + ", but the 4 micro-batches' block inputs take a rank to "), std::string::npos)
      << over.why;

  // Nothing to save, or no checkpoints to keep: micro-batch by micro-batch.
  JobConfig in_memory = config({"zero_optimization.stage=3", "gradient_accumulation_steps=4",
                                "activation_checkpointing.enabled=true", "zero_optimization.accumulation=\"auto\""});
  EXPECT_EQ(choice(in_memory, std::nullopt).why, "each micro-batch finds every layer and leaves its gradients in place");
  JobConfig plain = cfg;
  plain.activation_checkpointing = false;
  EXPECT_EQ(choice(plain, std::nullopt).mode, Accumulation::kMicroBatch);
  EXPECT_NE(choice(plain, std::nullopt).why.find("it needs activation checkpointing"), std::string::npos);

  // Trained: "auto" is the "layer" run, whose block inputs it moved.
  JobConfig layer = config(joined(base, {"zero_optimization.accumulation=\"layer\""}));
  MemoryAccountant ref_acct;
  CpuDevice ref_gpu(ref_acct, gpu_tier());
  const testing::TrainedRun ref = testing::train_to_end(layer, nullptr, ref_gpu);
  ASSERT_TRUE(ref.status.ok()) << ref.status;
  JobConfig capped = cfg;
  capped.run.gpu_memory_limit = on_gpu - 1;
  MemoryAccountant acct;
  expect_trains_as(capped, ref, acct);
  EXPECT_LE(acct.peaks().total[static_cast<int>(Tier::kGpu)], on_gpu - 1);
}

TEST_F(GpuTierOffloadTest, OffloadedStatesGradientsAndParametersLeaveTheGpu) {
  const JobConfig plain = config({"zero_optimization.stage=2"});
  const int64_t n = GptLayout(plain.model).num_params();
  {
    MemoryAccountant acct;
    CpuDevice gpu(acct, gpu_tier());
    ASSERT_TRUE(testing::train_to_end(plain, nullptr, gpu).status.ok());
    EXPECT_GE(acct.peak(Tier::kGpu, Category::kOptimizer), uint64_t(12 * n));
    EXPECT_GE(acct.peak(Tier::kGpu, Category::kGrads), uint64_t(4 * n));
    // A world of one reduces nothing: its comm memory is the staging of
    // backward's gradients alone, a slot for each of the 4 layers (the
    // default buckets hold them all), the embeddings and the final
    // LayerNorm, and no reduced chunks beside them.
    const GptLayout layout(plain.model);
    const Partition part(layout, 1);
    auto slot = [&](int u) { return CachingAllocator::block_size(part.chunk(u) * 4); };
    EXPECT_EQ(acct.peak(Tier::kGpu, Category::kComm), 4 * slot(1) + slot(0) + slot(layout.final_unit()));
  }
  const uint64_t sum = CachingAllocator::block_size(Partition(GptLayout(plain.model), 1).shard_numel() * 4);
  for (const auto& [mode, gpu_grads] : {std::pair{"auto", sum}, std::pair{"fp32", sum}, std::pair{"compute", 0ul}}) {
    SCOPED_TRACE(mode);
    MemoryAccountant acct;
    CpuDevice gpu(acct, gpu_tier());
    const JobConfig cfg = config(joined({"zero_optimization.stage=2", micro_batch_grads(mode)}, optimizer_on("cpu")));
    ASSERT_TRUE(testing::train_to_end(cfg, nullptr, gpu).status.ok());
    EXPECT_EQ(acct.peak(Tier::kGpu, Category::kOptimizer), 0u);
    EXPECT_EQ(acct.peak(Tier::kGpu, Category::kGrads), gpu_grads);
    EXPECT_GE(acct.peak(Tier::kHost, Category::kOptimizer), uint64_t(12 * n));
    EXPECT_GE(acct.peak(Tier::kHost, Category::kGrads), uint64_t(4 * n));
  }
  {
    // Layers above the persistence threshold are gathered into two slots
    // (the one in use and the next), not kept.
    const JobConfig cfg =
        config(joined(joined({"zero_optimization.stage=3", "zero_optimization.stage3_param_persistence_threshold=0"},
                             params_on("cpu")),
                      joined(optimizer_on("cpu"), {micro_batch_grads("compute")})));
    const GptLayout layout(cfg.model);
    const Partition part(layout, 1);
    auto slot = [&](int u) { return CachingAllocator::block_size(part.chunk(u) * 2); };
    MemoryAccountant acct;
    CpuDevice gpu(acct, gpu_tier());
    ASSERT_TRUE(testing::train_to_end(cfg, nullptr, gpu).status.ok());
    EXPECT_EQ(acct.peak(Tier::kGpu, Category::kParams), 2 * slot(1) + slot(0) + slot(layout.final_unit()));
    EXPECT_LT(acct.peak(Tier::kGpu, Category::kParams), uint64_t(2 * n));
    EXPECT_EQ(acct.peak(Tier::kGpu, Category::kOptimizer), 0u);
    EXPECT_EQ(acct.peak(Tier::kGpu, Category::kGrads), 0u);
  }
}

// A cap below what the model needs on the GPU without offload: that run is
// refused, naming the tier and what holds it; with the states, gradients
// and parameters on the host it trains under the cap, with the bits of the
// uncapped run.
TEST_F(GpuTierOffloadTest, ARunTooLargeForTheGpuCapTrainsWithEverythingOffloaded) {
  const JobConfig offloaded =
      config(joined(joined({"zero_optimization.stage=3"}, params_on("cpu")), optimizer_on("cpu")));
  uint64_t offloaded_peak = 0, plain_peak = 0;
  testing::TrainedRun uncapped;
  {
    MemoryAccountant acct;
    CpuDevice gpu(acct, gpu_tier());
    uncapped = testing::train_to_end(offloaded, nullptr, gpu);
    ASSERT_TRUE(uncapped.status.ok()) << uncapped.status;
    offloaded_peak = acct.peak_total(Tier::kGpu);
  }
  {
    MemoryAccountant acct;
    CpuDevice gpu(acct, gpu_tier());
    ASSERT_TRUE(testing::train_to_end(config({"zero_optimization.stage=3"}), nullptr, gpu).status.ok());
    plain_peak = acct.peak_total(Tier::kGpu);
  }
  ASSERT_LT(offloaded_peak, plain_peak);
  const uint64_t cap = (offloaded_peak + plain_peak) / 2;

  MemoryAccountant acct;
  acct.set_limit(Tier::kGpu, cap);
  {
    CpuDevice gpu(acct, gpu_tier());
    const testing::TrainedRun refused = testing::train_to_end(config({"zero_optimization.stage=3"}), nullptr, gpu);
    EXPECT_TRUE(absl::IsResourceExhausted(refused.status)) << refused.status;
    EXPECT_NE(refused.status.message().find("gpu memory limit of " + std::to_string(cap)), std::string::npos)
        << refused.status;
  }
  acct.reset_peaks();
  CpuDevice gpu(acct, gpu_tier());
  const testing::TrainedRun capped = testing::train_to_end(offloaded, nullptr, gpu);
  ASSERT_TRUE(capped.status.ok()) << capped.status;
  EXPECT_LE(acct.peak_total(Tier::kGpu), cap);
  EXPECT_EQ(capped.losses, uncapped.losses);
  EXPECT_TRUE(testing::same_bits(capped.params, uncapped.params));
}

// Registration through a hook: on the test's thread at once; on any other
// (the background ones, the host's update thread) only once the test's
// thread has registered something (a copy met memory not yet registered),
// or after a second.
class HeldPinning {
 public:
  HeldPinning() {
    hook_.pin = [this](void*, uint64_t) {
      std::unique_lock<std::mutex> lock(mu_);
      if (std::this_thread::get_id() == test_thread_) {
        released_ = true;
        cv_.notify_all();
      } else {
        cv_.wait_for(lock, std::chrono::seconds(1), [&] { return released_; });
      }
      return absl::OkStatus();
    };
    hook_.unpin = [](void*) {};
    set_pinning_hook(&hook_);
  }
  ~HeldPinning() { set_pinning_hook(nullptr); }

 private:
  PinningHook hook_;
  const std::thread::id test_thread_ = std::this_thread::get_id();
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// A GPU's host staging is pinned (CpuDeviceOptions pins), and registered
// behind the start: here the background threads hold their registrations
// until a copy on the test's thread has met memory not yet registered and
// registered it. Each copy waits for (or makes) the registrations it
// meets, none runs before (the device aborts if one does), and every
// offload gives the bits of the plain CPU device.
TEST_F(GpuTierOffloadTest, PinnedStagingRegisteredBehindTheStartGivesTheSameBits) {
  CpuDeviceOptions pinned = gpu_tier();
  pinned.pins = true;
  for (int stage : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    const std::vector<std::string> base = {"zero_optimization.stage=" + std::to_string(stage)};
    const testing::TrainedRun ref = plain_cpu_run(base);
    ASSERT_TRUE(ref.status.ok()) << ref.status;
    std::vector<std::vector<std::string>> variants = {joined(base, optimizer_on("cpu")),
                                                      joined(base, optimizer_on("nvme"))};
    if (stage == 3) variants.push_back(joined(joined(base, params_on("cpu")), optimizer_on("cpu")));
    for (const auto& v : variants) {
      SCOPED_TRACE(v.back());
      MemoryAccountant acct;
      const PinningTimes before = pinning_times();
      HeldPinning held;
      {
        CpuDevice gpu(acct, pinned);
        const testing::TrainedRun r = testing::train_to_end(config(v), nullptr, gpu);
        ASSERT_TRUE(r.status.ok()) << r.status;
        EXPECT_EQ(r.losses, ref.losses);
        EXPECT_TRUE(testing::same_bits(r.params, ref.params));
      }
      const PinningTimes pinning = pinning_times().since(before);
      EXPECT_GT(acct.peak_total(Tier::kPinned), 0u);
      EXPECT_EQ(acct.current_total(Tier::kPinned), 0u);
      EXPECT_GE(pinning.bytes, acct.peak_total(Tier::kPinned));
      EXPECT_GT(pinning.wait_s, 0.0);  // a copy came before its memory's registration
    }
  }
}

// Stages 2 and 3 with the optimizer on the host, no clipping: the units
// whose micro-batches are summed on the GPU (all of them with "fp32",
// half the sum's bytes or none with "compute") are updated there, AdamW
// and 8-bit AdamW, the working copy in GPU memory or offloaded to host
// memory, with the bits of the run in memory; of the others, those the
// plan shares with the GPU too, the rest on the host; the plan foresees
// every tier and category to the byte. With clipping the factor is known
// after backward, and without pin_memory the copies would hold the host:
// the host updates them all.
TEST_F(GpuTierOffloadTest, TheGpuUpdatesTheUnitsSummedThereWithTheBitsOfTheRunInMemory) {
  const std::string eight_bit = "optimizer.type=\"AdamW8bit\"";
  enum class Kept { kAll, kHalf, kNone };  // "fp32"; "compute" with half the sum's bytes on the GPU, or none
  struct Case {
    std::vector<std::string> overrides;
    Kept kept;
    bool params_offloaded;
    bool on_device;  // any unit updated there
  };
  const std::vector<Case> cases = {
      {{"zero_optimization.stage=2", "gradient_clipping=0"}, Kept::kAll, false, true},
      {{"zero_optimization.stage=3", "gradient_clipping=0", eight_bit}, Kept::kAll, false, true},
      {{"zero_optimization.stage=2", "gradient_clipping=0", eight_bit}, Kept::kHalf, false, true},
      {{"zero_optimization.stage=3", "gradient_clipping=0"}, Kept::kHalf, false, true},
      {{"zero_optimization.stage=2", "gradient_clipping=0"}, Kept::kNone, false, true},
      {{"zero_optimization.stage=3", "gradient_clipping=0"}, Kept::kAll, true, true},
      {{"zero_optimization.stage=3", "gradient_clipping=0", eight_bit}, Kept::kHalf, true, true},
      {{"zero_optimization.stage=3", "gradient_clipping=0"}, Kept::kNone, true, true},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0"}, Kept::kAll, false, false},
      // Memory the link would copy is not pinned: a copy would hold the
      // thread enqueueing it, so the host updates them all.
      {{"zero_optimization.stage=2", "gradient_clipping=0", "zero_optimization.offload_optimizer.pin_memory=false"},
       Kept::kAll,
       false,
       false},
      {{"zero_optimization.stage=3", "gradient_clipping=0", "zero_optimization.offload_param.pin_memory=false"},
       Kept::kNone,
       true,
       false},
  };
  MemoryAccountant probe_acct;
  CpuDevice probe(probe_acct, gpu_tier());
  const KernelMemory kernels = kernel_memory_for(probe);
  for (const Case& c : cases) {
    std::string name = c.kept == Kept::kAll ? "all kept: " : c.kept == Kept::kHalf ? "half kept: " : "none kept: ";
    if (c.params_offloaded) name += "parameters offloaded: ";
    for (const std::string& o : c.overrides) name += o + " ";
    SCOPED_TRACE(name);
    const std::string mode = micro_batch_grads(c.kept == Kept::kAll ? "fp32" : "compute");
    MemoryAccountant cpu_acct;
    CpuDevice cpu(cpu_acct);
    const testing::TrainedRun ref = testing::train_to_end(config(joined(c.overrides, {mode})), nullptr, cpu);
    ASSERT_TRUE(ref.status.ok()) << ref.status;

    JobConfig offloaded = config(joined(joined(joined(c.overrides, optimizer_on("cpu")), {mode}),
                                        c.params_offloaded ? params_on("cpu") : std::vector<std::string>{}));
    const Partition part(GptLayout(offloaded.model), 1);
    if (c.kept != Kept::kAll) {
      offloaded.zero.compute_sums_on_device_bytes = c.kept == Kept::kHalf ? part.shard_numel() * 2 : 0;
    }
    const int kept =
        c.kept == Kept::kAll
            ? part.num_units()
            : MicroBatchSums{2, DType::kBF16, offloaded.zero.compute_sums_on_device_bytes}.device_units(part);
    MemoryPlan plan(plan_device(probe));
    ASSERT_TRUE(Trainer::plan(offloaded, 1, 0, kernels, plan).ok());
    MemoryAccountant acct;
    MemoryPeaks got;
    {
      CpuDevice gpu(acct, gpu_tier());
      auto t = Trainer::create(offloaded, nullptr, &gpu);
      ASSERT_TRUE(t.ok()) << t.status();
      std::vector<double> losses;
      for (int64_t i = 0; i < offloaded.run.steps; ++i) {
        auto r = (*t)->step();
        ASSERT_TRUE(r.ok()) << r.status();
        losses.push_back(r->loss);
      }
      got = acct.peaks();  // before the test's own gather of the masters
      auto params = (*t)->master_params();
      ASSERT_TRUE(params.ok()) << params.status();
      EXPECT_EQ(losses, ref.losses);
      EXPECT_TRUE(testing::same_bits(*params, ref.params));
      const ZeroEngine& zero = (*t)->zero();
      // Kept units, and those of the others the plan shares with the device.
      const int shared = zero.units_shared_with_device();
      EXPECT_EQ(zero.units_updated_on_device(), c.on_device ? offloaded.run.steps * (kept + shared) : 0);
      EXPECT_EQ(shared > 0, c.on_device && c.kept != Kept::kAll) << shared;
      // Without clipping every unit is updated during backward, wherever.
      const bool in_backward = std::ranges::count(c.overrides, "gradient_clipping=0") > 0;
      EXPECT_EQ(zero.units_updated_in_backward(), in_backward ? offloaded.run.steps * part.num_units() : 0);
      EXPECT_EQ(zero.parts_updated_on_device() > 0, c.on_device);
      EXPECT_EQ(kept == 0, c.kept == Kept::kNone);
      EXPECT_EQ(kept > 0 && kept < part.num_units(), c.kept == Kept::kHalf);
    }
    const MemoryPeaks want = plan.peaks();
    for (int t = 0; t < kNumTiers; ++t) {
      const char* tier = tier_name(static_cast<Tier>(t));
      EXPECT_EQ(want.total[t], got.total[t]) << tier;
      for (int k = 0; k < kNumCategories; ++k) {
        EXPECT_EQ(want.peak[t][k], got.peak[t][k]) << tier << " " << category_name(static_cast<Category>(k));
      }
    }
  }
}

// Four micro-batches a step, sent in bf16: the host holds those of a
// group but its last and adds them all in one pass (fold 2, 3 and 4; with
// 3 the step's last is a group of its own), with nothing or half the sum
// kept on the GPU, the host updating during backward or after it, the
// parameters offloaded too, fp16 with super_offload's undo: bitwise the
// in-memory "compute" run, the held rows in the host's grads row as
// planned. "auto" holds four where the host's memory allows, else two,
// else none.
TEST_F(GpuTierOffloadTest, MicroBatchesHeldOnTheHostAndAddedInOnePassGiveTheSameBits) {
  const std::string compute = micro_batch_grads("compute"), four = "gradient_accumulation_steps=4";
  const std::string super = "zero_optimization.offload_optimizer.super_offload=true";
  const std::vector<std::vector<std::string>> cases = {
      {"zero_optimization.stage=2", "gradient_clipping=0"},
      {"zero_optimization.stage=3", "gradient_clipping=3.0"},
      joined({"zero_optimization.stage=3", "gradient_clipping=0"}, params_on("cpu")),
      {"zero_optimization.stage=2", "gradient_clipping=3.0", super, "bf16.enabled=false", "fp16.enabled=true",
       "fp16.initial_scale_power=12"},
  };
  MemoryAccountant probe_acct;
  CpuDevice probe(probe_acct, gpu_tier());
  const KernelMemory kernels = kernel_memory_for(probe);
  for (const std::vector<std::string>& c : cases) {
    std::string name;
    for (const std::string& o : c) name += o + " ";
    SCOPED_TRACE(name);
    std::vector<std::string> in_memory = c;
    std::erase(in_memory, super);
    std::erase_if(in_memory, [](const std::string& k) { return k.starts_with("zero_optimization.offload_param"); });
    MemoryAccountant cpu_acct;
    CpuDevice cpu(cpu_acct);
    const testing::TrainedRun ref = testing::train_to_end(config(joined(in_memory, {four, compute})), nullptr, cpu);
    ASSERT_TRUE(ref.status.ok()) << ref.status;
    JobConfig offloaded = config(joined(joined(c, optimizer_on("cpu")), {four, compute}));
    const Partition part(GptLayout(offloaded.model), 1);
    for (const uint64_t kept : {uint64_t{0}, static_cast<uint64_t>(part.shard_numel()) * 2}) {
      for (const int fold : {2, 3, 4}) {
        SCOPED_TRACE(::testing::Message() << kept << " bytes of the sum on the GPU, fold " << fold);
        offloaded.zero.compute_sums_on_device_bytes = kept;
        offloaded.zero.compute_host_fold = fold;
        MemoryPlan plan(plan_device(probe));
        ASSERT_TRUE(Trainer::plan(offloaded, 1, 0, kernels, plan).ok());
        MemoryAccountant acct;
        expect_trains_as(offloaded, ref, acct);
        // The host shard and the held rows of the units not kept.
        const int units = MicroBatchSums{4, DType::kBF16, kept}.device_units(part);
        const uint64_t held =
            (fold - 1) * (part.shard_numel() - part.shard_offset(units)) * dtype_size(offloaded.precision);
        EXPECT_EQ(acct.peak(Tier::kHost, Category::kGrads), part.shard_numel() * 4 + held);
        EXPECT_EQ(plan.peaks().peak[static_cast<int>(Tier::kHost)][static_cast<int>(Category::kGrads)],
                  part.shard_numel() * 4 + held);
      }
    }
  }

  // "auto" under a GPU cap below the sum's plan: four held with room,
  // two where the host's limit holds two and not four, none below that.
  JobConfig base =
      config(joined(joined({"zero_optimization.stage=2", "gradient_clipping=0"}, optimizer_on("cpu")), {four}));
  auto host_total = [&](int fold) {
    JobConfig resolved = base;
    resolved.zero.micro_batch_grads = MicroBatchGrads::kCompute;
    resolved.zero.compute_host_fold = fold;
    MemoryPlan plan(plan_device(probe));
    EXPECT_TRUE(Trainer::plan(resolved, 1, 0, kernels, plan).ok());
    const MemoryPeaks p = plan.peaks();
    return p.total[static_cast<int>(Tier::kHost)] + p.total[static_cast<int>(Tier::kPinned)];
  };
  auto gpu_total = [&](MicroBatchGrads mode) {
    JobConfig resolved = base;
    resolved.zero.micro_batch_grads = mode;
    MemoryPlan plan(plan_device(probe));
    EXPECT_TRUE(Trainer::plan(resolved, 1, 0, kernels, plan).ok());
    return plan.peaks().total[static_cast<int>(Tier::kGpu)];
  };
  // No room for sums on the GPU: every unit's micro-batches are held.
  base.run.gpu_memory_limit = gpu_total(MicroBatchGrads::kCompute);
  ASSERT_LT(*base.run.gpu_memory_limit, gpu_total(MicroBatchGrads::kF32));
  const uint64_t one = host_total(1), two = host_total(2), all = host_total(4);
  ASSERT_LT(one, two);
  ASSERT_LT(two, all);
  for (const auto& [limit, want] : {std::pair{std::optional<uint64_t>{}, 4}, std::pair{std::optional{all}, 4},
                                    std::pair{std::optional{all - 1}, 2}, std::pair{std::optional{two - 1}, 1}}) {
    base.run.host_memory_limit = limit;
    auto choice = resolve_micro_batch_grads(base, 1, kernels, plan_device(probe));
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->mode, MicroBatchGrads::kCompute);
    EXPECT_EQ(choice->sums_on_device_bytes, 0u);
    EXPECT_EQ(choice->host_fold, want) << (limit ? *limit : 0);
  }
}

// How DeviceSteps::share places the units summed on the host, worked by
// hand: AdamW units of 1000 elements (12000 bytes of states, 16000 up,
// 30000 through the host's memory with a bf16 working copy).
TEST(DeviceSteps, ShareGivesEachUnitWhereItIsDoneSooner) {
  const DeviceSteps::UnitBytes unit{12000, 1000, 2};
  const std::vector<DeviceSteps::UnitBytes> five(5, unit);
  // None kept: unit 4 to the idle device (16000); 3 to the host (32000 >
  // 30000); 2 and 1 to the device (32000, then 48000 <= 60000); 0 to the
  // host (64000 > 60000).
  EXPECT_EQ(DeviceSteps::share(five, 0), (std::vector<bool>{false, true, true, false, true}));
  // Two kept (24000 on the device first): 4 to the host (40000 > 30000), 3
  // and 2 to the device (40000, then 56000 <= 60000).
  EXPECT_EQ(DeviceSteps::share(five, 2), (std::vector<bool>{false, false, true, true, false}));
  // All kept: none is the host's to share.
  EXPECT_EQ(DeviceSteps::share(five, 5), std::vector<bool>(5, false));
  // 8-bit states (about 6 bytes an element: 10000 up, 18000 on the host),
  // one kept (6000): 4 to the device (16000 <= 18000), 3 to the host
  // (26000 > 18000), 2 and 1 to the device (26000, then 36000 <= 36000).
  const std::vector<DeviceSteps::UnitBytes> eight(5, DeviceSteps::UnitBytes{6000, 1000, 2});
  EXPECT_EQ(DeviceSteps::share(eight, 1), (std::vector<bool>{false, true, true, false, true}));
}

// DeviceSteps against the host's update of the same pieces (AdamW and
// 8-bit AdamW): parts of 1024 elements, so that pieces are split, with a
// short last part, and small pieces are one part each; the gradients
// written on the compute stream just before, and the working copy read
// back on it just after finish() (or read at once, where it is in host
// memory), behind the threaded, delayed streams. Half the units read their
// sums on the device, the others from host memory, enqueued from a thread
// of their own as the host's adder does.
// Three steps: the masters, states and working copy are the host's, bit
// for bit.
TEST(DeviceSteps, UpdateInPartsOnTheDeviceWithTheHostsBits) {
  GptConfig model{1, 2, 64, 256, 16};  // 16384-element matrices: quantized, 16 parts each
  const GptLayout layout(model);
  for (const auto& [type, working_on_host] : {std::pair{"AdamW", false}, std::pair{"AdamW8bit", false},
                                              std::pair{"AdamW", true}, std::pair{"AdamW8bit", true}}) {
    SCOPED_TRACE(::testing::Message() << type << (working_on_host ? ", the working copy in host memory" : ""));
    OptimizerConfig cfg;
    cfg.type = std::string(type) == "AdamW" ? OptimizerType::kAdamW : OptimizerType::kAdamW8bit;
    cfg.weight_decay = 0.1;
    MemoryAccountant acct;
    CpuDevice gpu(acct, gpu_tier()), host(acct);
    const std::unique_ptr<Kernels> kernels = *kernels_for(gpu), host_kernels = *kernels_for(host);
    const std::unique_ptr<Communicator> comm = make_local_communicator();
    ZeroContext ctx(layout, 3, DType::kBF16, *comm, gpu, *kernels, host, *host_kernels);
    const int64_t numel = ctx.part.shard_numel();

    // The same initial masters for both; gradients new each step.
    std::vector<float> ref_masters(numel), masters(numel), grads(numel);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& x : ref_masters) x = normal(rng);
    masters = ref_masters;
    std::vector<uint16_t> ref_working(numel);
    auto optimizer_over = [&](float* m, uint16_t* working) {
      std::vector<ParamPiece> pieces = piece_shapes(ctx.owned);
      for (size_t k = 0; k < pieces.size(); ++k) {
        pieces[k].master = m + ctx.owned[k].shard_offset;
        pieces[k].grad = grads.data() + ctx.owned[k].shard_offset;
        if (working) pieces[k].param16 = working + ctx.owned[k].shard_offset;
      }
      return Optimizer::create_unbound(cfg, std::move(pieces), DType::kBF16);
    };
    const std::unique_ptr<Optimizer> ref = optimizer_over(ref_masters.data(), ref_working.data()),
                                     opt = optimizer_over(masters.data(), nullptr);
    std::vector<char> ref_states(ref->state_bytes()), states(opt->state_bytes());
    ref->bind(ref_states.data());
    opt->bind(states.data());
    ref->zero_states(host, host.compute_stream());
    opt->zero_states(host, host.compute_stream());

    Buffer device_grads = *gpu.allocate(numel * 4, Category::kGrads);
    // The working copy where the model reads it, or in host memory.
    Buffer working = *(working_on_host ? host : gpu).allocate(numel * 2, Category::kParams);
    std::vector<void*> working_of;
    for (const ShardSegment& s : ctx.owned) working_of.push_back(working.ptr<uint16_t>() + s.shard_offset);
    const int units = ctx.part.num_units(), kept = units / 2;
    std::vector<std::pair<int, int>> unit_pieces(units, {-1, -1});
    for (size_t k = 0; k < ctx.owned.size(); ++k) {
      auto& [first, last] = unit_pieces[ctx.owned[k].unit];
      if (first < 0) first = static_cast<int>(k);
      last = static_cast<int>(k) + 1;
    }
    auto steps = DeviceSteps::create(ctx, *opt, unit_pieces, kept, working_on_host, 1024);
    ASSERT_TRUE(steps.ok()) << steps.status();
    EXPECT_FALSE(DeviceSteps::create(ctx, *opt, unit_pieces, kept, working_on_host, 1000).ok());  // not whole blocks

    std::vector<uint16_t> got_working(numel);
    for (int64_t step = 1; step <= 3; ++step) {
      for (float& g : grads) g = normal(rng);
      ref->step(*host_kernels, host.compute_stream(), 1e-3f, step, 0.5f);
      gpu.copy(ctx.stream, device_grads.data(), grads.data(), numel * 4);
      auto enqueue = [&](int u, bool on_host) {
        const auto [first, last] = unit_pieces[u];
        const float* sum = (on_host ? grads.data() : device_grads.ptr<float>()) + ctx.owned[first].shard_offset;
        (*steps)->enqueue(first, last, sum, on_host, working_of, 1e-3f, step, 0.5f);
      };
      std::thread adder([&] {
        for (int u = units - 1; u >= kept; --u) enqueue(u, /*on_host=*/true);
      });
      for (int u = kept - 1; u >= 0; --u) enqueue(u, /*on_host=*/false);
      adder.join();
      ASSERT_TRUE((*steps)->finish().ok());
      if (working_on_host) {
        // finish() waited for it.
        std::memcpy(got_working.data(), working.data(), numel * 2);
      } else {
        gpu.copy(ctx.stream, got_working.data(), working.data(), numel * 2);
        ASSERT_TRUE(gpu.synchronize(ctx.stream).ok());
      }
      EXPECT_TRUE(testing::same_bits(masters, ref_masters)) << "step " << step;
      EXPECT_EQ(states, ref_states) << "step " << step;
      EXPECT_EQ(got_working, ref_working) << "step " << step;
    }
    int64_t parts = 0;
    for (const ShardSegment& s : ctx.owned) parts += (s.numel + 1023) / 1024;
    EXPECT_EQ((*steps)->parts(), 3 * parts);
    EXPECT_GT(parts, static_cast<int64_t>(ctx.owned.size()));  // some pieces in several parts
  }
}

}  // namespace
}  // namespace zerod
