// Offload in one process: optimizer states in host memory (cpu) or streamed
// through a file (nvme), and stage 3's parameter shard in host memory or a
// file, give bitwise the run without offload; bad nvme_path settings are
// refused before anything is allocated; I/O faults stop the run with the
// file and offset named, leave the last checkpoint as it was, and leave no
// thread or descriptor.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include <sys/statvfs.h>

#include <filesystem>

#include "offload/offload_config.h"
#include "offload/swap_dir.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/engine/trainer.h"
#include "shard/zero_engine.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

// The small job with accumulation over two micro-batches.
JobConfig make_config(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"run.seed=5", "gradient_accumulation_steps=2"});
  return testing::config_with(testing::tiny_job(), overrides);
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> params;
};

TrainRun train(const JobConfig& cfg) {
  TrainRun r;
  auto t = testing::make_trainer(cfg);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return r;
  for (int i = 0; i < cfg.run.steps; ++i) {
    auto s = (*t)->step();
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return r;
    r.losses.push_back(s->loss);
  }
  auto p = (*t)->master_params();
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) r.params = std::move(*p);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class OffloadTest : public testing::TempDirTest {
 protected:
  std::vector<std::string> nvme(int64_t sub_group, int buffers) const {
    return {"zero_optimization.offload_optimizer.device=\"nvme\"",
            "zero_optimization.offload_optimizer.nvme_path=\"" + dir_.string() + "\"",
            "zero_optimization.offload_optimizer.buffer_count=" + std::to_string(buffers),
            "zero_optimization.sub_group_size=" + std::to_string(sub_group),
            // Small requests and a short queue, so a sub-group takes many.
            "aio.block_size=8192", "aio.queue_depth=3"};
  }
  // offload_param on `device` (stage 3) with `buffers` window buffers.
  std::vector<std::string> params_on(const std::string& device, int buffers) const {
    return {"zero_optimization.stage=3", "zero_optimization.offload_param.device=\"" + device + "\"",
            "zero_optimization.offload_param.nvme_path=\"" + dir_.string() + "\"",
            "zero_optimization.offload_param.buffer_count=" + std::to_string(buffers), "aio.block_size=8192",
            "aio.queue_depth=3"};
  }
};

using testing::joined;

TEST_F(OffloadTest, OptimizerOnCpuOrNvmeIsBitwiseTheInMemoryRun) {
  const std::vector<std::vector<std::string>> variants = {
      {"zero_optimization.stage=0"},
      {"zero_optimization.stage=1", "bf16.enabled=true"},
      {"zero_optimization.stage=2", "optimizer.type=AdamW8bit"},
      {"zero_optimization.stage=3", "fp16.enabled=true"},
      {"zero_optimization.stage=3", "optimizer.type=AdamW8bit", "bf16.enabled=true"},
  };
  // gpt2-tiny has about 120K parameters: sub-groups of 10000 make a dozen.
  const std::pair<int64_t, int> pipelines[] = {{10000, 4}, {10000, 2}, {10000, 1}, {1000000000, 4}};
  for (const auto& v : variants) {
    std::string name;
    for (const auto& o : v) name += o + " ";
    SCOPED_TRACE(name);
    const TrainRun ref = train(make_config(v));
    ASSERT_EQ(ref.losses.size(), 5u);
    auto cpu = v;
    cpu.push_back("zero_optimization.offload_optimizer.device=\"cpu\"");
    const TrainRun on_cpu = train(make_config(cpu));
    EXPECT_EQ(on_cpu.losses, ref.losses);
    EXPECT_TRUE(same_bits(on_cpu.params, ref.params));
    for (const auto& [sub_group, buffers] : pipelines) {
      SCOPED_TRACE(::testing::Message() << "sub_group_size " << sub_group << ", buffer_count " << buffers);
      auto o = v;
      for (const auto& s : nvme(sub_group, buffers)) o.push_back(s);
      const TrainRun on_nvme = train(make_config(o));
      EXPECT_EQ(on_nvme.losses, ref.losses);
      EXPECT_TRUE(same_bits(on_nvme.params, ref.params));
    }
  }
  // The swap files are unlinked when made: nothing is left in nvme_path.
  EXPECT_EQ(testing::count_proc_entries(dir_.c_str()), 0);
}

TEST_F(OffloadTest, ParamsOnCpuOrNvmeAreBitwiseTheInMemoryRun) {
  const std::vector<std::vector<std::string>> variants = {
      {},  // fp32: the masters are kept apart from the parameters only because those are offloaded
      {"bf16.enabled=true"},
      {"fp16.enabled=true", "optimizer.type=AdamW8bit"},
      // Without clipping an offloaded optimizer updates each unit during
      // backward, and the host thread writes its new parameters.
      {"bf16.enabled=true", "gradient_clipping=0"},
      // Embeddings larger than a layer: they go through the window's large buffer.
      {"bf16.enabled=true", "model.preset=\"custom\"", "model.n_layer=3", "model.n_embd=32", "model.n_head=2",
       "model.vocab_size=2048", "model.block_size=32"},
  };
  // gpt2-tiny's layers are below the default persistence threshold, so they
  // are gathered once per update; with the threshold at 0, every pass, the
  // next one prefetched (and its read started a layer earlier), or not.
  const std::vector<std::vector<std::string>> gathers = {
      {},
      {"zero_optimization.stage3_param_persistence_threshold=0"},
      {"zero_optimization.stage3_param_persistence_threshold=0", "zero_optimization.stage3_prefetch_bucket_size=0"},
  };
  const std::vector<std::vector<std::string>> offloads = {
      params_on("cpu", 5),
      params_on("nvme", 1),
      joined(params_on("nvme", 2), {"zero_optimization.offload_optimizer.device=\"cpu\""}),
      joined(params_on("nvme", 5), nvme(10000, 2)),
  };
  for (const auto& v : variants) {
    for (const auto& g : gathers) {
      const auto base = joined(joined({"zero_optimization.stage=3"}, v), g);
      std::string name;
      for (const auto& o : base) name += o + " ";
      SCOPED_TRACE(name);
      const TrainRun ref = train(make_config(base));
      ASSERT_EQ(ref.losses.size(), 5u);
      for (size_t i = 0; i < offloads.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "offload " << i);
        const TrainRun off = train(make_config(joined(base, offloads[i])));
        EXPECT_EQ(off.losses, ref.losses);
        EXPECT_TRUE(same_bits(off.params, ref.params));
      }
    }
  }
  EXPECT_EQ(testing::count_proc_entries(dir_.c_str()), 0);
}

// The shard leaves host memory for its tier; what stays is the window:
// buffer_count buffers of a layer's chunk and one for the larger embedding
// chunk, each a page-padded record. Where the host writes units during
// backward (the optimizer on the host, no clipping) its writer has two
// buffers and a large one more, beside the two buffers the host thread
// adds reduced chunks from.
TEST_F(OffloadTest, ParamsOffloadedLeaveTheWindowInHostMemory) {
  const std::vector<std::string> model = {"bf16.enabled=true", "zero_optimization.stage=3",
                                          "model.preset=\"custom\"", "model.n_layer=3", "model.n_embd=32",
                                          "model.n_head=2", "model.vocab_size=2048", "model.block_size=32"};
  const JobConfig ref_cfg = make_config(model);
  const Partition part(GptLayout(ref_cfg.model), 1);
  const int last = part.num_units() - 1;
  auto record = [](int64_t numel) { return (numel * 2 + 4095) / 4096 * 4096; };
  int64_t records = 0;
  for (int u = 0; u < part.num_units(); ++u) records += record(part.chunk(u));
  ASSERT_GT(part.chunk(0), part.chunk(1));
  ASSERT_LE(part.chunk(last), part.chunk(1));
  const int64_t window = 3 * record(part.chunk(1)) + record(part.chunk(0));

  MemoryAccountant& acct = MemoryAccountant::global();
  auto host = [&](Category c) { return static_cast<int64_t>(acct.current(Tier::kHost, c)); };
  // The window and the records in host memory: pinned where a GPU copies from them.
  const Tier buffers = offload_buffer_tier(make_config(joined(model, params_on("cpu", 3))).zero.offload_param,
                                           plan_device(testing::test_device()));
  auto in_buffers = [&](Category c) { return static_cast<int64_t>(acct.current(buffers, c)); };
  int64_t params_in_memory = 0;
  {
    auto t = testing::make_trainer(ref_cfg);
    ASSERT_TRUE(t.ok()) << t.status();
    params_in_memory = host(Category::kParams);
    EXPECT_EQ(host(Category::kOffload), 0);
  }
  const std::vector<std::string> during_backward = {"zero_optimization.offload_optimizer.device=\"cpu\"",
                                                    "gradient_clipping=0"};
  const int64_t writer = 2 * record(part.chunk(1)) + record(part.chunk(0));
  const int64_t arrivals = 2 * std::ranges::max(part.chunks()) * 4;
  for (const auto& [device, written_in_backward] :
       {std::pair{"cpu", false}, std::pair{"nvme", false}, std::pair{"nvme", true}}) {
    SCOPED_TRACE(::testing::Message() << device << (written_in_backward ? ", written during backward" : ""));
    auto t = testing::make_trainer(make_config(joined(
        joined(model, params_on(device, 3)), written_in_backward ? during_backward : std::vector<std::string>{})));
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->step().ok());
    const int64_t on_nvme = acct.current(Tier::kNvme, Category::kParams);
    EXPECT_EQ(host(Category::kParams) + (buffers == Tier::kHost ? 0 : in_buffers(Category::kParams)),
              params_in_memory - part.shard_numel() * 2 + (device == std::string("cpu") ? records : 0));
    EXPECT_EQ(on_nvme, device == std::string("nvme") ? records : 0);
    EXPECT_EQ(in_buffers(Category::kOffload), window + (written_in_backward ? writer + arrivals : 0));
  }
  EXPECT_EQ(acct.current(Tier::kNvme, Category::kParams), 0u);
  EXPECT_EQ(in_buffers(Category::kOffload), 0);
}

// The states, and at stages 2 and 3 the gradient shard, leave host memory
// for their files; what stays is three sub-group buffers (a record of 12
// bytes an element plus room for its gradients), the gradients' window
// (three buffers of a layer's fp32 chunk) and the two buffers the host
// thread adds reduced chunks from (of the largest unit's chunk).
TEST_F(OffloadTest, StatesOnNvmeLeaveHostMemoryToTheBuffers) {
  auto o = nvme(8192, 3);
  o.push_back("bf16.enabled=true");
  o.push_back("zero_optimization.stage=2");
  const JobConfig cfg = make_config(o);
  const Partition part(GptLayout(cfg.model), 1);
  ASSERT_LE(part.chunk(0), part.chunk(1));
  int64_t grad_records = 0;
  for (int u = 0; u < part.num_units(); ++u) grad_records += (part.chunk(u) * 4 + 4095) / 4096 * 4096;
  MemoryAccountant& acct = MemoryAccountant::global();
  auto host = [&](Category c) { return static_cast<int64_t>(acct.current(Tier::kHost, c)); };
  auto nvme_bytes = [&](Category c) { return static_cast<int64_t>(acct.current(Tier::kNvme, c)); };
  // Pinned where a GPU copies from them.
  auto in_buffers = [&](Category c) {
    const Tier t = offload_buffer_tier(cfg.zero.offload_optimizer, plan_device(testing::test_device()));
    return static_cast<int64_t>(acct.current(t, c));
  };
  auto t = testing::make_trainer(cfg);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->step().ok());
  const int64_t n = (*t)->num_params();
  // Master weights, m and v: 12 bytes a parameter in the file, none in memory.
  EXPECT_GE(nvme_bytes(Category::kOptimizer), 12 * n);
  EXPECT_EQ(host(Category::kOptimizer), 0);
  EXPECT_EQ(nvme_bytes(Category::kGrads), grad_records);
  EXPECT_EQ(host(Category::kGrads), 0);
  EXPECT_EQ(in_buffers(Category::kOffload), 3 * (12 + 4) * 8192 + 3 * ((part.chunk(1) * 4 + 4095) / 4096 * 4096) +
                                                2 * std::ranges::max(part.chunks()) * 4);
  t->reset();
  EXPECT_EQ(nvme_bytes(Category::kOptimizer), 0);
  EXPECT_EQ(nvme_bytes(Category::kGrads), 0);
  EXPECT_EQ(in_buffers(Category::kOffload), 0);
}

// At stage 2 with the states on NVMe, the gradients go to a file of their
// own: each micro-batch's reduced chunks are added to what the one before
// wrote. Updated after backward (clipping needs the norm first), a step
// writes every unit's record twice and reads it back for the second
// micro-batch, the norm and the update; updated as each unit is completed
// (no clipping), the last micro-batch's sums go straight to the update and
// are neither written nor read back.
TEST_F(OffloadTest, GradientsUsedDuringBackwardAreNeitherWrittenNorReadBack) {
  const int steps = 3;
  for (const bool during_backward : {false, true}) {
    SCOPED_TRACE(during_backward ? "updated during backward" : "updated after backward");
    const JobConfig cfg =
        make_config(joined(nvme(10000, 2), {"zero_optimization.stage=2", "run.steps=" + std::to_string(steps),
                                            during_backward ? "gradient_clipping=0" : "gradient_clipping=1.0"}));
    const Partition part(GptLayout(cfg.model), 1);
    int64_t records = 0;
    for (int u = 0; u < part.num_units(); ++u) records += (part.chunk(u) * 4 + 4095) / 4096 * 4096;
    std::atomic<int64_t> written{0}, read{0};
    IoFaultHook hook;
    hook.on_complete = [&](bool write, const std::string& file, uint64_t, uint32_t, int r) {
      if (file.find("zerod-grads-rank00000") != std::string::npos && r > 0) (write ? written : read) += r;
      return r;
    };
    auto t = testing::make_trainer(cfg, nullptr, {hook});
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < steps; ++i) ASSERT_TRUE((*t)->step().ok());
    EXPECT_EQ((*t)->zero().units_updated_in_backward(), during_backward ? steps * part.num_units() : 0);
    if (during_backward) {
      EXPECT_EQ(written, steps * records);
      EXPECT_EQ(read, steps * records);
    } else {
      EXPECT_EQ(written, 2 * steps * records);
      EXPECT_GE(read, 3 * steps * records);
    }
  }
}

// super_offload with the states on NVMe: each unit is updated during
// backward and its new records written to their second place in the file
// (the file twice the records), the ones read staying where they were; a
// step that clips keeps those and updates again after the norm, an fp16
// overflow keeps them and skips. fp32 masters, which the in-memory
// optimizer updates in place as the parameters, are then kept in the file
// too. Every step is bitwise the in-memory run's.
TEST_F(OffloadTest, SuperOffloadOnNvmeKeepsTheRecordsItMayUndo) {
  const std::string super = "zero_optimization.offload_optimizer.super_offload=true";
  const std::vector<std::string> fp16 = {"fp16.enabled=true", "fp16.initial_scale_power=24", "fp16.hysteresis=1"};
  struct Variant {
    std::vector<std::string> overrides;
    bool fp32;  // parameters: the masters in the file only under super_offload
  };
  const std::vector<Variant> variants = {
      {{"zero_optimization.stage=2", "gradient_clipping=3.0"}, true},
      {{"zero_optimization.stage=3", "gradient_clipping=3.0", "bf16.enabled=true"}, false},
      {{"zero_optimization.stage=2", "gradient_clipping=3.0", "optimizer.type=AdamW8bit"}, true},
      {joined({"zero_optimization.stage=3", "gradient_clipping=0"}, fp16), false},
  };
  MemoryAccountant& acct = MemoryAccountant::global();
  for (const auto& [v, fp32] : variants) {
    std::string name;
    for (const auto& o : v) name += o + " ";
    SCOPED_TRACE(name);
    const JobConfig in_memory = make_config(joined(v, {"run.steps=6"}));
    const TrainRun ref = train(in_memory);
    ASSERT_EQ(ref.losses.size(), 6u);
    // The records with the masters in them: as with 16-bit parameters.
    uint64_t records = 0;
    {
      auto with_masters = joined(v, nvme(10000, 2));
      if (fp32) with_masters.push_back("bf16.enabled=true");
      auto t = testing::make_trainer(make_config(with_masters));
      ASSERT_TRUE(t.ok()) << t.status();
      records = acct.current(Tier::kNvme, Category::kOptimizer);
    }
    const JobConfig cfg = make_config(joined(joined(v, {"run.steps=6", super}), nvme(10000, 2)));
    auto t = testing::make_trainer(cfg);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(acct.current(Tier::kNvme, Category::kOptimizer), 2 * records);
    std::vector<double> losses;
    int64_t changed = 0;  // steps that clip or overflow
    for (int i = 0; i < cfg.run.steps; ++i) {
      auto r = (*t)->step();
      ASSERT_TRUE(r.ok()) << r.status();
      losses.push_back(r->loss);
      changed += r->skipped || (cfg.gradient_clipping > 0 && cfg.gradient_clipping / (r->grad_norm + 1e-6) < 1);
    }
    EXPECT_EQ(losses, ref.losses);
    EXPECT_TRUE(same_bits(*(*t)->master_params(), ref.params));
    EXPECT_EQ((*t)->zero().units_updated_in_backward(), cfg.run.steps * GptLayout(cfg.model).num_units());
    EXPECT_EQ((*t)->zero().updates_undone(), changed);
    EXPECT_GT(changed, 0);
    EXPECT_LT(changed, cfg.run.steps);
  }
}

// A host memory limit five times smaller than the fp32 optimizer states
// (28 million parameters: 342 MB of master weights, m and v, a 67 MB
// limit). With everything in memory the trainer cannot be built; with the
// states, the gradient shard and the parameter shard on NVMe it trains, and
// the host peak stays within the limit: what stays in memory is one layer
// gathered and reduced at a time and the offload windows.
TEST_F(OffloadTest, StatesSeveralTimesTheHostLimitTrainFromNvme) {
  const std::vector<std::string> model = {"model.preset=\"custom\"", "model.n_layer=16", "model.n_embd=384",
                                          "model.n_head=4", "model.vocab_size=256", "model.block_size=32",
                                          "data.seq_len=16", "train_micro_batch_size_per_gpu=1",
                                          "zero_optimization.stage=3", "bf16.enabled=true", "run.steps=2",
                                          "zero_optimization.stage3_prefetch_bucket_size=0",
                                          "zero_optimization.stage3_param_persistence_threshold=0",
                                          "zero_optimization.overlap_comm=false"};
  const auto offloaded =
      joined(joined(model, nvme(262144, 2)), joined(params_on("nvme", 2), {"aio.block_size=1048576"}));
  MemoryAccountant& acct = MemoryAccountant::global();
  const uint64_t limit = 64 << 20;
  acct.set_limit(Tier::kHost, limit);
  struct Unlimit {
    ~Unlimit() { MemoryAccountant::global().set_limit(Tier::kHost, 0); }
  } unlimit;
  acct.reset_peaks();
  auto in_memory = testing::make_trainer(make_config(model));
  EXPECT_EQ(in_memory.status().code(), absl::StatusCode::kResourceExhausted) << in_memory.status();
  in_memory = absl::UnknownError("");
  acct.reset_peaks();
  {
    auto t = testing::make_trainer(make_config(offloaded));
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*t)->step().ok());
    const uint64_t states = acct.current(Tier::kNvme, Category::kOptimizer);
    EXPECT_GE(states, uint64_t(12) * (*t)->num_params());
    EXPECT_GT(states, 5 * limit) << "states " << states << " bytes";
    EXPECT_LE(acct.peak_total(Tier::kHost), limit);
  }
}

TEST_F(OffloadTest, BadNvmePathsAreRefusedBeforeAnythingIsAllocated) {
  write("a_file", "x");
  struct Case {
    std::string path;
    absl::StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {path("missing"), absl::StatusCode::kNotFound, "does not exist"},
      {path("a_file"), absl::StatusCode::kInvalidArgument, "is not a directory"},
      {"/sys", absl::StatusCode::kPermissionDenied, "cannot create files in '/sys'"},
  };
  MemoryAccountant& acct = MemoryAccountant::global();
  for (const std::string which : {"offload_optimizer", "offload_param"}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(which + " " + c.path);
      auto o = which == "offload_param" ? params_on("nvme", 2) : nvme(10000, 4);
      o.push_back("zero_optimization." + which + ".nvme_path=\"" + c.path + "\"");
      const uint64_t host_before = acct.current_total(Tier::kHost);
      auto t = testing::make_trainer(make_config(o));
      ASSERT_FALSE(t.ok());
      EXPECT_EQ(t.status().code(), c.code) << t.status();
      EXPECT_NE(t.status().message().find("zero_optimization." + which + ".nvme_path"), std::string::npos);
      EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status();
      EXPECT_EQ(acct.current_total(Tier::kHost), host_before);
    }
  }
  // A model whose states need more than the disk has (about 12 billion
  // parameters, 8 bytes each for m and v): the bytes needed are named.
  auto o = nvme(1000000000, 4);
  o.push_back("model.preset=\"custom\"");
  o.push_back("model.n_layer=16");
  o.push_back("model.n_embd=8192");
  o.push_back("model.n_head=64");
  o.push_back("model.vocab_size=256");
  o.push_back("model.block_size=64");
  auto t = testing::make_trainer(make_config(o));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("bytes free, but the offloaded files need"), std::string::npos) << t.status();
  // The same for a parameter shard of about 200 billion bf16 parameters.
  o = params_on("nvme", 2);
  for (const char* m : {"model.preset=\"custom\"", "model.n_layer=256", "model.n_embd=8192", "model.n_head=64",
                        "model.vocab_size=256", "model.block_size=64"}) {
    o.push_back(m);
  }
  o.push_back("bf16.enabled=true");
  t = testing::make_trainer(make_config(o));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("zero_optimization.offload_param.nvme_path"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("bytes free, but the offloaded files need"), std::string::npos) << t.status();
}

// Files bound for one directory need the room of all of them; files in
// different directories are checked each against its own. Sizes are 60% of
// what the disk has free, so each alone fits and two together do not.
TEST_F(OffloadTest, FilesInOneDirectoryNeedTheRoomOfAll) {
  const std::string a = path("a"), b = path("b");
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  struct statvfs vfs;
  ASSERT_EQ(statvfs(a.c_str(), &vfs), 0);
  const uint64_t each = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / 10 * 6;
  EXPECT_TRUE(check_swap_dirs({{a, each, "states"}}).ok());
  EXPECT_TRUE(check_swap_dirs({{a, each, "states"}, {b, each, "params"}}).ok());
  const absl::Status both = check_swap_dirs({{a, each, "states"}, {b, each, "params"}, {a, each, "grads"}});
  EXPECT_EQ(both.code(), absl::StatusCode::kFailedPrecondition) << both;
  // Named by the first setting that puts a file there.
  EXPECT_EQ(both.message().rfind("states: '" + a + "' has ", 0), 0u) << both;
  EXPECT_NE(both.message().find("the offloaded files need " + std::to_string(2 * each)), std::string::npos) << both;
}

// Faults armed after a step and a checkpoint, on one file: the next step
// fails naming the file, the offset and the error; the checkpoint still loads to the
// state it saved; no thread or descriptor is left once the trainer is gone.
TEST_F(OffloadTest, IoFaultsStopTheRunWithTheFileAndOffsetNamed) {
  enum Fault { kDiskFull, kShortWriteThenDiskFull, kEioOnRead };
  const std::vector<std::string> during_backward = {"zero_optimization.stage=2", "gradient_clipping=0"};
  // Clipping, the updates during backward undoable.
  const std::vector<std::string> undoably = {"zero_optimization.stage=2", "gradient_clipping=1.0",
                                             "zero_optimization.offload_optimizer.super_offload=true"};
  struct Case {
    const char* what;
    std::vector<std::string> offload;
    const char* file;
    Fault fault;
    const char* message;
  };
  const Case cases[] = {
      {"states: disk full on write-back", nvme(10000, 3), "zerod-optimizer-rank00000", kDiskFull,
       "No space left on device"},
      {"states: EIO on read", nvme(10000, 3), "zerod-optimizer-rank00000", kEioOnRead, "Input/output error"},
      {"params: a short write, then disk full", params_on("nvme", 2), "zerod-params-rank00000", kShortWriteThenDiskFull,
       "No space left on device"},
      {"params: EIO on read", params_on("nvme", 2), "zerod-params-rank00000", kEioOnRead, "Input/output error"},
      {"params, written during backward: disk full",
       joined(params_on("nvme", 2), {"zero_optimization.offload_optimizer.device=\"cpu\"", "gradient_clipping=0"}),
       "zerod-params-rank00000", kDiskFull, "No space left on device"},
      // At stage 2 without clipping the host thread adds the gradients to
      // their file and updates each unit during backward.
      {"states, updated during backward: disk full on write-back", joined(nvme(10000, 2), during_backward),
       "zerod-optimizer-rank00000", kDiskFull, "No space left on device"},
      {"states, updated during backward: EIO on read", joined(nvme(10000, 2), during_backward),
       "zerod-optimizer-rank00000", kEioOnRead, "Input/output error"},
      {"gradients, added during backward: EIO on read", joined(nvme(10000, 2), during_backward),
       "zerod-grads-rank00000", kEioOnRead, "Input/output error"},
      {"states, updated undoably during backward: disk full on write-back", joined(nvme(10000, 2), undoably),
       "zerod-optimizer-rank00000", kDiskFull, "No space left on device"},
      {"states, updated undoably during backward: EIO on read", joined(nvme(10000, 2), undoably),
       "zerod-optimizer-rank00000", kEioOnRead, "Input/output error"},
  };
  // The worker threads of OpenMP start with the first training step and
  // stay; so do CUDA's threads and descriptors, where a GPU pins the buffers.
  train(make_config(joined(cases[0].offload, {"run.steps=1"})));
  const int fds = testing::count_proc_entries("/proc/self/fd"), threads = testing::count_proc_entries("/proc/self/task");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const JobConfig cfg = make_config(c.offload);
    const std::string root = path(std::string("ckpt-") + c.file + std::to_string(c.fault));
    std::atomic<bool> armed{false};
    std::atomic<int> writes{0};
    IoFaultHook hook;
    hook.on_complete = [&](bool write, const std::string& file, uint64_t, uint32_t, int r) {
      if (!armed || file.find(c.file) == std::string::npos) return r;
      if (c.fault == kEioOnRead) return write ? r : -EIO;
      if (!write) return r;
      // Half of the first request (a whole page: the rest is resubmitted at an aligned offset).
      if (c.fault == kShortWriteThenDiskFull && writes++ == 0 && r >= 8192) return r / 8192 * 4096;
      return -ENOSPC;
    };
    std::vector<float> saved_params;
    {
      auto t = testing::make_trainer(cfg, nullptr, {hook});
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE((*t)->step().ok());
      EXPECT_EQ((*t)->zero().units_updated_in_backward() > 0,
                std::ranges::count(c.offload, during_backward[1]) + std::ranges::count(c.offload, undoably[2]) > 0);
      ASSERT_TRUE((*t)->save_checkpoint(root, 2).ok());
      saved_params = *(*t)->master_params();
      armed = true;
      absl::Status failed;
      for (int i = 0; i < 5 && failed.ok(); ++i) failed = (*t)->step().status();
      ASSERT_FALSE(failed.ok());
      EXPECT_NE(failed.message().find(c.message), std::string::npos) << failed;
      EXPECT_NE(failed.message().find(c.file), std::string::npos) << failed;
      EXPECT_NE(failed.message().find("at offset"), std::string::npos) << failed;
      if (c.fault == kShortWriteThenDiskFull) {
        EXPECT_GE(writes, 2);
      }
    }
    EXPECT_EQ(testing::count_proc_entries("/proc/self/fd"), fds);
    EXPECT_EQ(testing::count_proc_entries("/proc/self/task"), threads);
    {
      auto t = testing::make_trainer(cfg);
      ASSERT_TRUE(t.ok()) << t.status();
      auto latest = latest_checkpoint(root);
      ASSERT_TRUE(latest.ok()) << latest.status();
      EXPECT_EQ(*latest, root + "/step-00000001");
      ASSERT_TRUE((*t)->resume(*latest).ok());
      EXPECT_TRUE(same_bits(*(*t)->master_params(), saved_params));
    }
  }
}

}  // namespace
}  // namespace zerod
