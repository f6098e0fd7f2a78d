// Trainer checkpoints in one process: saving mid-run and resuming gives
// bitwise the same continuation; bad checkpoints are refused and change
// nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/trainer.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

JobConfig make_config(const std::vector<std::string>& overrides) {
  nlohmann::json j = {
      {"model", {{"preset", "gpt2-tiny"}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 32}}},
      {"run", {{"steps", 6}, {"seed", 7}, {"device", "cpu"}}},
      {"train_micro_batch_size_per_gpu", 4},
      {"gradient_accumulation_steps", 2},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.1}}}}},
      {"scheduler", {{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 2}, {"total_num_steps", 6}}}}},
  };
  return testing::config_with(j, overrides);
}

std::unique_ptr<Trainer> make_trainer(const JobConfig& cfg, TrainerEnv env = {}) {
  auto t = testing::make_trainer(cfg, nullptr, std::move(env));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::vector<double> run_steps(Trainer& t, int n) {
  std::vector<double> losses;
  for (int i = 0; i < n; ++i) {
    auto s = t.step();
    EXPECT_TRUE(s.ok()) << s.status();
    losses.push_back(s->loss);
  }
  return losses;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Holds the background writer of a trainer made with env() as it opens
// its file, until open() (or the end of its scope, so a failed test does
// not leave a trainer waiting on it). Files opened on the thread that made
// env() pass at once.
class HeldWriter {
 public:
  ~HeldWriter() { open(); }
  TrainerEnv env() const {
    IoFaultHook faults;
    faults.on_open = [gate = gate_, go = gate_->released.get_future().share(),
                      caller = std::this_thread::get_id()](const std::string&, int) {
      if (std::this_thread::get_id() != caller) {
        ++gate->entered;
        go.wait();
      }
      return 0;
    };
    return {faults};
  }
  void open() {
    if (!gate_->opened.exchange(true)) gate_->released.set_value();
  }
  int entered() const { return gate_->entered; }

 private:
  struct Gate {
    std::promise<void> released;
    std::atomic<bool> opened{false};
    std::atomic<int> entered{0};
  };
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
};

uint64_t host_workspace() { return MemoryAccountant::global().current(Tier::kHost, Category::kWorkspace); }

class TrainerCheckpointTest : public testing::TempDirTest {};

// Train 3 steps, save, train 3 more; a fresh trainer resumed from the save
// trains the same 3 steps: identical losses and parameters, bit for bit.
TEST_F(TrainerCheckpointTest, ResumeContinuesBitwiseAtEveryStage) {
  const std::vector<std::vector<std::string>> variants = {
      {"zero_optimization.stage=0"},
      {"zero_optimization.stage=1"},
      {"zero_optimization.stage=2", "optimizer.type=AdamW8bit"},
      {"zero_optimization.stage=3"},
      {"zero_optimization.stage=3", "optimizer.type=AdamW8bit", "bf16.enabled=true"},
      {"zero_optimization.stage=1", "fp16.enabled=true"},
      // A Llama: its manifest records its shape.
      {"zero_optimization.stage=3", "model.preset=llama-tiny", "bf16.enabled=true"},
      {"zero_optimization.stage=1", "model.preset=llama-tiny"},
      // Offloaded: the parameter shard on NVMe is rewritten from the loaded masters.
      {"zero_optimization.stage=3", "bf16.enabled=true", "zero_optimization.offload_param.device=\"nvme\"",
       "zero_optimization.offload_param.nvme_path=\"" + dir_.string() + "\"",
       "zero_optimization.offload_optimizer.device=\"cpu\""},
      {"zero_optimization.stage=3", "zero_optimization.offload_param.device=\"cpu\""},
      // Optimizer states (and at stages 2-3 gradients) in files: the arrays
      // go through the sub-group buffers, 5 sub-groups of 30000 elements.
      {"zero_optimization.stage=0", "zero_optimization.offload_optimizer.device=\"nvme\"",
       "zero_optimization.offload_optimizer.nvme_path=\"" + dir_.string() + "\"",
       "zero_optimization.sub_group_size=30000"},
      {"zero_optimization.stage=2", "optimizer.type=AdamW8bit", "bf16.enabled=true",
       "zero_optimization.offload_optimizer.device=\"nvme\"",
       "zero_optimization.offload_optimizer.nvme_path=\"" + dir_.string() + "\"",
       "zero_optimization.sub_group_size=30000"},
      {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=\"nvme\"",
       "zero_optimization.offload_optimizer.nvme_path=\"" + dir_.string() + "\"",
       "zero_optimization.offload_param.device=\"nvme\"",
       "zero_optimization.offload_param.nvme_path=\"" + dir_.string() + "\"",
       "zero_optimization.sub_group_size=30000"},
  };
  for (const auto& v : variants) {
    std::string name;
    for (const auto& o : v) name += o + " ";
    SCOPED_TRACE(name);
    const JobConfig cfg = make_config(v);
    const std::string root = path("ckpt-" + std::to_string(&v - variants.data()));

    auto a = make_trainer(cfg);
    run_steps(*a, 3);
    auto saved = a->save_checkpoint(root, 2);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(*saved, root + "/step-00000003");
    const std::vector<double> want = run_steps(*a, 3);
    const std::vector<float> want_params = *a->master_params();

    auto b = make_trainer(cfg);
    ASSERT_TRUE(b->resume(*saved).ok());
    EXPECT_EQ(b->steps_done(), 3);
    const std::vector<double> got = run_steps(*b, 3);
    EXPECT_EQ(got, want);
    EXPECT_TRUE(same_bits(*b->master_params(), want_params));
  }
}

// Offload is not part of the checkpoint: one saved with the states in files
// resumes in memory, and one saved in memory resumes into files, each
// continuing bitwise as the trainer that saved it does.
TEST_F(TrainerCheckpointTest, ResumesWithOrWithoutOffload) {
  const std::vector<std::string> base = {"zero_optimization.stage=3", "optimizer.type=AdamW8bit", "bf16.enabled=true"};
  auto offloaded = base;
  for (const char* o : {"zero_optimization.offload_optimizer.device=\"nvme\"",
                        "zero_optimization.offload_param.device=\"nvme\"",
                        "zero_optimization.sub_group_size=30000"}) {
    offloaded.push_back(o);
  }
  offloaded.push_back("zero_optimization.offload_optimizer.nvme_path=\"" + dir_.string() + "\"");
  offloaded.push_back("zero_optimization.offload_param.nvme_path=\"" + dir_.string() + "\"");
  const std::vector<std::string>* configs[] = {&base, &offloaded};
  for (int from = 0; from < 2; ++from) {
    SCOPED_TRACE(from == 0 ? "saved in memory, resumed offloaded" : "saved offloaded, resumed in memory");
    auto a = make_trainer(make_config(*configs[from]));
    run_steps(*a, 3);
    auto saved = a->save_checkpoint(path("ckpt-" + std::to_string(from)), 1);
    ASSERT_TRUE(saved.ok()) << saved.status();
    const std::vector<double> want = run_steps(*a, 3);
    auto b = make_trainer(make_config(*configs[1 - from]));
    ASSERT_TRUE(b->resume(*saved).ok());
    EXPECT_EQ(run_steps(*b, 3), want);
    EXPECT_TRUE(same_bits(*b->master_params(), *a->master_params()));
  }
}

// The directory as the protocol leaves it: manifest last, `latest`, keep.
TEST_F(TrainerCheckpointTest, SavesAManifestAndKeepsTheNewest) {
  auto t = make_trainer(make_config({"zero_optimization.stage=2"}));
  const std::string root = path("ckpt");
  for (int i = 0; i < 3; ++i) {
    run_steps(*t, 1);
    ASSERT_TRUE(t->save_checkpoint(root, 2).ok());
  }
  EXPECT_FALSE(fs::exists(root + "/step-00000001"));
  EXPECT_TRUE(fs::exists(root + "/step-00000002/manifest.json"));
  EXPECT_EQ(*latest_checkpoint(root), root + "/step-00000003");
  std::ifstream in(root + "/step-00000003/manifest.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json m = nlohmann::json::parse(ss.str());
  EXPECT_EQ(m["step"], 3);
  EXPECT_EQ(m["zero_stage"], 2);
  EXPECT_EQ(m["world_size"], 1);
  EXPECT_EQ(m["files"].size(), 1u);
  EXPECT_EQ(m["tensors"][0]["name"], "wte");
  EXPECT_EQ(m["tensors"][2]["name"], "h.0.ln_1.weight");
  EXPECT_EQ(m["files"][0]["bytes"], fs::file_size(root + "/step-00000003/rank-00000.safetensors"));
}

// A save in the background copies the state at its start and writes it
// while training goes on: the writer is held until three more steps are
// done, and the files are still byte for byte those a foreground save at
// the same step writes; a resume from them continues as the saver did.
TEST_F(TrainerCheckpointTest, BackgroundSaveKeepsTheStateAtItsStartWhileTrainingGoesOn) {
  const std::vector<std::vector<std::string>> variants = {
      {"zero_optimization.stage=0"},
      {"zero_optimization.stage=2", "optimizer.type=AdamW8bit", "bf16.enabled=true"},
      {"zero_optimization.stage=3", "fp16.enabled=true", "zero_optimization.offload_optimizer.device=\"cpu\""},
  };
  for (const auto& v : variants) {
    const int i = static_cast<int>(&v - variants.data());
    SCOPED_TRACE(i);
    const JobConfig cfg = make_config(v);
    const std::string root = path("bg-" + std::to_string(i)), dir = root + "/step-00000003";
    HeldWriter held;
    auto a = make_trainer(cfg, held.env());
    run_steps(*a, 3);
    std::vector<double> later;
    {
      const uint64_t workspace = host_workspace();
      ASSERT_TRUE(a->start_checkpoint(root, 2, /*background=*/true).ok());
      const uint64_t staged = host_workspace() - workspace;
      EXPECT_TRUE(a->checkpoint_pending());
      EXPECT_EQ(a->start_checkpoint(root, 2, true).code(), absl::StatusCode::kFailedPrecondition);
      auto polled = a->finish_checkpoint(/*wait=*/false);
      ASSERT_TRUE(polled.ok()) << polled.status();
      EXPECT_FALSE(polled->has_value());
      later = run_steps(*a, 3);
      EXPECT_FALSE(a->finish_checkpoint(false)->has_value());
      EXPECT_EQ(latest_checkpoint(root).status().code(), absl::StatusCode::kNotFound);
      EXPECT_FALSE(fs::exists(dir));
      held.open();
      auto saved = a->finish_checkpoint(/*wait=*/true);
      ASSERT_TRUE(saved.ok()) << saved.status();
      ASSERT_TRUE(saved->has_value());
      EXPECT_EQ((*saved)->step, 3);
      EXPECT_EQ((*saved)->path, dir);
      EXPECT_LE((*saved)->blocked_s, (*saved)->seconds);
      EXPECT_EQ(held.entered(), 1);
      EXPECT_FALSE(a->checkpoint_pending());
      // The staging buffer is accounted, and it is the file's size.
      EXPECT_EQ(staged, fs::file_size(dir + "/rank-00000.safetensors"));
    }
    EXPECT_EQ(*latest_checkpoint(root), dir);

    auto b = make_trainer(cfg);
    run_steps(*b, 3);
    testing::expect_same_files(dir, *b->save_checkpoint(path("fg-" + std::to_string(i)), 1));

    auto c = make_trainer(cfg);
    ASSERT_TRUE(c->resume(dir).ok());
    EXPECT_EQ(run_steps(*c, 3), later);
    EXPECT_TRUE(same_bits(*c->master_params(), *a->master_params()));
  }
}

// Where the shard cannot be staged (its states are in a swap file, or the
// buffer would pass the host memory limit) the save is written before
// start_checkpoint returns, and is the same as one in the foreground.
TEST_F(TrainerCheckpointTest, SavesInTheForegroundWhenTheShardCannotBeStaged) {
  const std::string nvme = dir_.string();
  const std::vector<std::string> swapped = {"zero_optimization.stage=2",
                                            "zero_optimization.offload_optimizer.device=\"nvme\"",
                                            "zero_optimization.offload_optimizer.nvme_path=\"" + nvme + "\""};
  MemoryAccountant& acct = MemoryAccountant::global();
  for (int limited = 0; limited < 2; ++limited) {
    SCOPED_TRACE(limited ? "host limit" : "states on nvme");
    HeldWriter held;
    auto t = make_trainer(make_config(limited ? std::vector<std::string>{"zero_optimization.stage=1"} : swapped),
                          held.env());
    run_steps(*t, 2);
    const std::string fg = *t->save_checkpoint(path("fg-" + std::to_string(limited)), 1);
    const uint64_t bytes = fs::file_size(fg + "/rank-00000.safetensors");
    if (limited) acct.set_limit(Tier::kHost, acct.current_total(Tier::kHost) + bytes / 2);
    const absl::Status s = t->start_checkpoint(path("bg-" + std::to_string(limited)), 1, /*background=*/true);
    acct.set_limit(Tier::kHost, 0);
    ASSERT_TRUE(s.ok()) << s;
    auto saved = t->finish_checkpoint(/*wait=*/false);
    ASSERT_TRUE(saved.ok()) << saved.status();
    ASSERT_TRUE(saved->has_value());
    EXPECT_EQ(held.entered(), 0);
    testing::expect_same_files((*saved)->path, fg);
  }
}

// The disk fills up under the given file of step 2's checkpoint.
IoFaultHook disk_full_under(const std::atomic<bool>& armed, const std::string& file) {
  IoFaultHook faults;
  faults.on_complete = [&armed, file](bool write, const std::string& path, uint64_t, uint32_t, int result) {
    return armed && write && path.find("step-00000002.tmp/" + file) != std::string::npos ? -ENOSPC : result;
  };
  return faults;
}

// A write that fails, in the foreground or the background, on the rank's
// file or the manifest, fails the save naming the file and the error, and
// leaves the checkpoint before it the latest and whole.
TEST_F(TrainerCheckpointTest, AFailedWriteLeavesTheCheckpointBefore) {
  for (const char* file : {"rank-00000.safetensors", "manifest.json"}) {
    for (bool background : {false, true}) {
      SCOPED_TRACE(std::string(file) + (background ? ", background" : ", foreground"));
      const std::string root = path(std::string("ckpt-") + file + (background ? "-bg" : "-fg"));
      std::atomic<bool> armed{false};
      auto t = make_trainer(make_config({"zero_optimization.stage=1"}), {disk_full_under(armed, file)});
      run_steps(*t, 1);
      ASSERT_TRUE(t->save_checkpoint(root, 3).ok());
      run_steps(*t, 1);
      armed = true;
      ASSERT_TRUE(t->start_checkpoint(root, 3, background).ok());
      auto failed = t->finish_checkpoint(/*wait=*/true);
      armed = false;
      EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
      EXPECT_NE(failed.status().message().find(std::string("step-00000002.tmp/") + file), std::string::npos)
          << failed.status();
      EXPECT_NE(failed.status().message().find("No space left on device"), std::string::npos) << failed.status();
      EXPECT_FALSE(t->checkpoint_pending());
      EXPECT_EQ(*latest_checkpoint(root), root + "/step-00000001");
      auto manifest = read_manifest(root + "/step-00000001");
      ASSERT_TRUE(manifest.ok()) << manifest.status();
      for (const ManifestFile& f : manifest->files) EXPECT_TRUE(verify_file(f).ok());
      // The next save goes through.
      run_steps(*t, 1);
      ASSERT_TRUE(t->save_checkpoint(root, 3).ok());
      EXPECT_EQ(*latest_checkpoint(root), root + "/step-00000003");
    }
  }
}

// A save in the background published at a poll; the removal of the
// checkpoints past `keep` is left to a thread.
TEST_F(TrainerCheckpointTest, ABackgroundSaveIsPublishedAtAPollAndPrunedByAThread) {
  const std::string root = path("ckpt");
  auto t = make_trainer(make_config({"zero_optimization.stage=1"}));
  EXPECT_EQ(t->finish_checkpoint(true).status().code(), absl::StatusCode::kFailedPrecondition);
  run_steps(*t, 1);
  ASSERT_TRUE(t->save_checkpoint(root, 3).ok());
  run_steps(*t, 1);
  ASSERT_TRUE(t->save_checkpoint(root, 3).ok());

  // finish_pruning waits for the removal.
  run_steps(*t, 1);
  ASSERT_TRUE(t->start_checkpoint(root, 1, true).ok());
  std::optional<SavedCheckpoint> saved;
  while (!saved) {
    auto polled = t->finish_checkpoint(/*wait=*/false);
    ASSERT_TRUE(polled.ok()) << polled.status();
    saved = *polled;
  }
  EXPECT_EQ(saved->path, root + "/step-00000003");
  EXPECT_EQ(*latest_checkpoint(root), root + "/step-00000003");
  ASSERT_TRUE(t->finish_pruning().ok());
  EXPECT_EQ(*list_checkpoints(root), (std::vector<int64_t>{3}));
}

// Each bad checkpoint is refused with its reason, and the trainer it was
// offered to goes on exactly as if it had not been.
TEST_F(TrainerCheckpointTest, RefusesBadCheckpointsAndChangesNothing) {
  const JobConfig cfg = make_config({"zero_optimization.stage=1"});
  const std::string root = path("ckpt");
  auto a = make_trainer(cfg);
  run_steps(*a, 2);
  const std::string ckpt = *a->save_checkpoint(root, 1);
  const std::string shard = ckpt + "/rank-00000.safetensors";

  const auto expect_refused = [&](const std::string& dir, absl::StatusCode code, const std::string& text) {
    auto fresh = make_trainer(cfg);
    const std::vector<float> before = *fresh->master_params();
    const absl::Status s = fresh->resume(dir);
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(text), std::string::npos) << s;
    EXPECT_EQ(fresh->steps_done(), 0);
    EXPECT_TRUE(same_bits(*fresh->master_params(), before));
    // It trains as a trainer that never saw the checkpoint.
    auto clean = make_trainer(cfg);
    EXPECT_EQ(run_steps(*fresh, 1), run_steps(*clean, 1));
  };
  expect_refused(path("absent"), absl::StatusCode::kNotFound, "no checkpoint manifest");

  // Another model, optimizer or precision (another stage or world size is
  // resumed: test_checkpoint_reshard.cc).
  const std::vector<std::pair<std::string, std::string>> others = {{"model.n_layer=3", "'model'"},
                                                                   {"model.preset=llama-tiny", "'model'"},
                                                                   {"optimizer.type=AdamW8bit", "'optimizer'"},
                                                                   {"optimizer.params.weight_decay=0", "'optimizer'"},
                                                                   {"bf16.enabled=true", "'precision'"}};
  for (const auto& [o, named] : others) {
    auto other = make_trainer(make_config({"zero_optimization.stage=1", o}));
    run_steps(*other, 1);
    const std::string p = *other->save_checkpoint(path("other"), 3);
    expect_refused(p, absl::StatusCode::kInvalidArgument, named);
  }

  // The shard file cut short, then whole again with one flipped byte.
  const std::string whole = testing::read_file(shard);
  fs::resize_file(shard, whole.size() - 100);
  expect_refused(ckpt, absl::StatusCode::kDataLoss, "rank-00000.safetensors: checksum or size");
  std::ofstream(shard, std::ios::binary) << whole;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.put('\x5a');
  }
  expect_refused(ckpt, absl::StatusCode::kDataLoss, "checksum");

  // A manifest whose file list does not fit its world size.
  {
    std::ifstream in(ckpt + "/manifest.json");
    nlohmann::json m = nlohmann::json::parse(in);
    m["world_size"] = 3;
    write("ckpt/step-00000002/manifest.json", m.dump());
    expect_refused(ckpt, absl::StatusCode::kInvalidArgument, "its checksum ('crc32c' ");
    seal_manifest(m);  // as if zerod had written it
    write("ckpt/step-00000002/manifest.json", m.dump());
  }
  expect_refused(ckpt, absl::StatusCode::kInvalidArgument, "lists 1 shard files for world_size 3 at zero_stage 1");
  // A manifest that is not one, or of a newer format.
  write("ckpt/step-00000002/manifest.json", "{\"format\": \"zerod-checkpoint\", \"version\": 99}");
  expect_refused(ckpt, absl::StatusCode::kInvalidArgument, absl::StrCat("format version 99 is not ", kManifestVersion));
  write("ckpt/step-00000002/manifest.json", "not json");
  expect_refused(ckpt, absl::StatusCode::kInvalidArgument, "manifest.json is not valid JSON");
}

}  // namespace
}  // namespace zerod
