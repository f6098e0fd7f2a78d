// zero-worker's command line, exit codes and run output, called in-process
// through run_worker (and once as the real binary).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/whole_file.h"
#include "runtime/data/token_shard.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/worker.h"
#include "runtime/telemetry/run_output.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

using testing::events;
using testing::of_kind;
#ifdef ZEROD_WITH_MPI
using testing::CommandResult;
using testing::mpirun;
#endif

using Result = testing::WorkerResult;
Result run(std::vector<std::string> args) { return testing::run_worker_with(std::move(args)); }

nlohmann::json small_job() {
  return {{"model", {{"preset", "gpt2-tiny"}}},
          {"data", {{"kind", "synthetic"}, {"seq_len", 16}}},
          {"run", {{"steps", 4}, {"seed", 3}, {"device", "cpu"}, {"sample", {{"tokens", 8}}}}},
          {"train_batch_size", 4},
          {"steps_per_print", 1},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}}};
}

class WorkerTest : public testing::TempDirTest {
 protected:
  std::string job(const nlohmann::json& j) { return write("job.json", j.dump()); }

  // Runs a job expected to be refused as bad input; returns its stderr.
  std::string refused(const nlohmann::json& j, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--config", job(j)};
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = run(args);
    EXPECT_EQ(r.code, kExitBadInput) << r.out << r.err;
    return r.err;
  }

  nlohmann::json with_data(const std::string& kind, const std::string& file) {
    nlohmann::json j = small_job();
    j["data"] = {{"kind", kind}, {"path", file}, {"seq_len", 16}};
    return j;
  }
};

// The small job for 6 steps with a checkpoint every 3 into `dir`.
nlohmann::json checkpointed_job(const std::string& dir) {
  nlohmann::json j = small_job();
  j["run"]["steps"] = 6;
  j["run"]["checkpoint"] = {{"dir", dir}, {"interval", 3}, {"keep", 3}};
  j["run"]["log_format"] = "json";
  return j;
}

TEST_F(WorkerTest, CheckpointsAtTheIntervalAndResumesBitwise) {
  const nlohmann::json j = checkpointed_job(path("ck"));
  const Result a = run({"--config", job(j)});
  ASSERT_EQ(a.code, kExitOk) << a.err;
  const auto all = events(a.out);
  const auto saves = of_kind(all, "checkpoint"), steps = of_kind(all, "step");
  ASSERT_EQ(saves.size(), 2u) << a.out;
  ASSERT_EQ(steps.size(), 6u);
  for (int i = 0; i < 2; ++i) {
    const std::string dir = path(i == 0 ? "ck/step-00000003" : "ck/step-00000006");
    EXPECT_EQ(saves[i]["step"], 3 * (i + 1));
    EXPECT_EQ(saves[i]["path"], dir);
    uint64_t bytes = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir)) bytes += f.file_size();
    EXPECT_EQ(saves[i]["bytes"], bytes);
    EXPECT_GT(bytes, 120576u * 12);  // the master weights, m and v at least
    EXPECT_LE(saves[i]["blocked_s"], saves[i]["seconds"]);
  }
  // Saved in the foreground instead, the checkpoints are the same files.
  nlohmann::json fg = j;
  fg["run"]["checkpoint"]["dir"] = path("ck-fg");
  fg["run"]["checkpoint"]["async"] = false;
  ASSERT_EQ(run({"--config", write("fg.json", fg.dump())}).code, kExitOk);
  for (const char* step : {"/step-00000003", "/step-00000006"}) {
    testing::expect_same_files(path("ck") + step, path("ck-fg") + step);
  }

  // From the step-3 checkpoint: steps 4-6 print the same losses, bit for bit.
  nlohmann::json b = j;
  b["run"]["checkpoint"]["dir"] = path("ck-b");
  b["run"]["resume"] = path("ck/step-00000003");
  const Result rb = run({"--config", write("b.json", b.dump())});
  ASSERT_EQ(rb.code, kExitOk) << rb.err;
  const auto resumed = of_kind(events(rb.out), "resume"), later = of_kind(events(rb.out), "step");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0]["step"], 3);
  ASSERT_EQ(later.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(later[i]["step"], 4 + i);
    EXPECT_EQ(later[i]["loss"], steps[3 + i]["loss"]);
  }
  EXPECT_EQ(of_kind(events(rb.out), "summary")[0]["steps"], 3);

  // "latest" with no checkpoint yet starts from the beginning.
  nlohmann::json c = j;
  c["run"]["checkpoint"]["dir"] = path("ck-c");
  c["run"]["resume"] = "latest";
  const Result rc = run({"--config", write("c.json", c.dump())});
  ASSERT_EQ(rc.code, kExitOk) << rc.err;
  const auto fresh = of_kind(events(rc.out), "resume");
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_TRUE(fresh[0]["path"].is_null());
  EXPECT_EQ(of_kind(events(rc.out), "step").size(), 6u);
}

TEST_F(WorkerTest, ACheckpointThatDoesNotFitIsRefusedWithExit2) {
  const nlohmann::json j = checkpointed_job(path("ck"));
  ASSERT_EQ(run({"--config", job(j)}).code, kExitOk);
  nlohmann::json other = j;
  other["run"]["resume"] = path("ck/step-00000099");
  EXPECT_NE(refused(other).find("step-00000099"), std::string::npos);
  other["run"]["resume"] = path("ck/step-00000003");
  other["model"]["n_layer"] = 3;
  EXPECT_NE(refused(other).find("'model'"), std::string::npos);
}

// A manifest edited by hand, its fields of the wrong JSON type or its model
// claiming more than the shard files hold, is refused by resume and by
// export with exit 2 and the file and field named, before anything the
// claimed shape needs is allocated (2^30 layers of gpt2-tiny would be 50
// TB; 2^20 would be 50 GB).
TEST_F(WorkerTest, AManifestOfTheWrongShapeIsRefusedByResumeAndExport) {
  const nlohmann::json j = checkpointed_job(path("ck"));
  ASSERT_EQ(run({"--config", job(j)}).code, kExitOk);
  const std::string saved = path("ck/step-00000003");
  const nlohmann::json manifest = nlohmann::json::parse(*read_whole_file(saved + "/manifest.json"));
  struct Edit {
    std::string what;
    std::function<void(nlohmann::json&)> edit;
    std::string message;
  };
  const std::vector<Edit> edits = {
      {"format a number", [](nlohmann::json& m) { m["format"] = 5; }, "not a zerod checkpoint manifest"},
      {"version a string", [](nlohmann::json& m) { m["version"] = "1"; }, "format version \"1\""},
      {"no tensors", [](nlohmann::json& m) { m.erase("tensors"); }, "'tensors' is missing"},
      {"2^30 layers", [](nlohmann::json& m) { m["model"]["n_layer"] = 1 << 30; }, "'model' claims"},
      {"2^20 layers", [](nlohmann::json& m) { m["model"]["n_layer"] = 1 << 20; }, "'model' claims"},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.what);
    const std::string dir = path("edited");
    std::filesystem::remove_all(dir);
    std::filesystem::copy(saved, dir);
    nlohmann::json m = manifest;
    e.edit(m);
    seal_manifest(m);  // crafted, not merely edited: past the checksum
    write("edited/manifest.json", m.dump());
    nlohmann::json resume = j;
    resume["run"]["checkpoint"]["dir"] = path("ck-resumed");
    resume["run"]["resume"] = dir;
    const std::string err = refused(resume);
    EXPECT_NE(err.find(dir + "/manifest.json: " + e.message), std::string::npos) << err;
    const Result x = run({"export", "--checkpoint", dir, "--out", path("hf")});
    EXPECT_EQ(x.code, kExitBadInput) << x.err;
    EXPECT_NE(x.err.find(dir + "/manifest.json: " + e.message), std::string::npos) << x.err;
  }
  EXPECT_FALSE(std::filesystem::exists(path("hf/model.safetensors")));
}

// A checkpoint directory that could not be written is refused before the
// first step (exit 2, the key named), not at the first save; nothing is
// created.
TEST_F(WorkerTest, AnUnwritableCheckpointDirIsRefusedAtStart) {
  write("plain-file", "not a directory");
  for (const std::string& dir : {path("plain-file"), path("plain-file/ck"), path("plain-file/a/b")}) {
    SCOPED_TRACE(dir);
    const nlohmann::json j = checkpointed_job(dir);
    nlohmann::json text = j;
    text["run"]["log_format"] = "text";
    const Result r = run({"--config", job(text)});
    EXPECT_EQ(r.code, kExitBadInput) << r.err;
    EXPECT_NE(r.err.find("run.checkpoint.dir: checkpoint dir " + dir), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("plain-file is not a directory"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  }
  EXPECT_EQ(*read_whole_file(path("plain-file")), "not a directory");
  // A directory not there yet, under one that is, is fine: the run makes it.
  const Result ok = run({"--config", job(checkpointed_job(path("new/deeper/ck")))});
  EXPECT_EQ(ok.code, kExitOk) << ok.err;
}

// The manifest's own checksum refuses a hand edit (resume and export);
// a sealed one whose resumed state is out of range is refused naming the
// field, and nothing is written (the new checkpoint directory stays absent).
TEST_F(WorkerTest, AManifestEditedByHandOrOutOfRangeIsRefused) {
  const nlohmann::json j = checkpointed_job(path("ck"));
  ASSERT_EQ(run({"--config", job(j)}).code, kExitOk);
  const std::string saved = path("ck/step-00000003");
  const nlohmann::json manifest = nlohmann::json::parse(*read_whole_file(saved + "/manifest.json"));
  struct Edit {
    std::string field;
    nlohmann::json value;
    bool seal;
    std::string message;
  };
  const std::vector<Edit> edits = {
      {"step", -3, false, "its checksum ('crc32c' "},
      {"step", -3, true, "'step' is -3, not an integer in [0, "},
      {"updates", 4, true, "'updates' is 4, not an integer in [0, 3]"},
      {"last_lr", -1, true, "'last_lr' is -1, not a finite number, not negative"},
      {"last_lr", "0.1", true, "'last_lr' is \"0.1\", not a finite number"},
      {"data_loader.position", -1, true, "'data_loader.position' is -1, not an integer in [0, 2^64)"},
      {"loss_scaler.scale", -1, true, "'loss_scaler.scale' is -1, not a finite positive number"},
      {"loss_scaler.scale", 0, true, "'loss_scaler.scale' is 0, not a finite positive number"},
      {"loss_scaler.last_overflow_iter", 99, true, "'loss_scaler.last_overflow_iter' is 99, not an integer in [-1, "},
      {"rng.sample", 1.5, true, "'rng.sample' is 1.5, not an integer in [0, 2^64)"},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.field + " = " + e.value.dump() + (e.seal ? ", sealed" : ""));
    const std::string dir = path("edited");
    std::filesystem::remove_all(dir);
    std::filesystem::copy(saved, dir);
    nlohmann::json m = manifest;
    m[nlohmann::json::json_pointer(absl::StrCat("/", absl::StrReplaceAll(e.field, {{".", "/"}})))] = e.value;
    if (e.seal) seal_manifest(m);
    write("edited/manifest.json", m.dump(2));
    nlohmann::json resume = j;
    resume["run"]["checkpoint"]["dir"] = path("ck-resumed");
    resume["run"]["resume"] = dir;
    const std::string err = refused(resume);
    EXPECT_NE(err.find(dir + "/manifest.json: " + e.message), std::string::npos) << err;
    EXPECT_FALSE(std::filesystem::exists(path("ck-resumed")));
    if (!e.seal) {
      const Result x = run({"export", "--checkpoint", dir, "--out", path("hf")});
      EXPECT_EQ(x.code, kExitBadInput) << x.err;
      EXPECT_NE(x.err.find(dir + "/manifest.json: " + e.message), std::string::npos) << x.err;
    }
  }
}

// A key given twice in any JSON the worker reads (nlohmann would keep the
// last) is refused with exit 2, the file and the object named: the config
// file, a --set value, a checkpoint's manifest.
TEST_F(WorkerTest, ADuplicateKeyInAnyJsonItReadsIsRefused) {
  const std::string text = small_job().dump();
  ASSERT_EQ(text.front(), '{');
  const std::string twice = write("twice.json", "{\"train_batch_size\": 8, " + text.substr(1));
  Result r = run({"--config", twice});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_NE(
      r.err.find("config file '" + twice + "' is not valid JSON: duplicate key 'train_batch_size' in the top level"),
      std::string::npos)
      << r.err;
  r = run({"--config", job(small_job()), "--set", "optimizer.params={\"lr\": 0.1, \"lr\": 0.2}"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_NE(r.err.find("is not valid JSON: duplicate key 'lr' in the top level"), std::string::npos) << r.err;

  nlohmann::json j = checkpointed_job(path("ck"));
  ASSERT_EQ(run({"--config", job(j)}).code, kExitOk);
  const std::string manifest = path("ck/step-00000003/manifest.json");
  const std::string saved = *read_whole_file(manifest);
  write("ck/step-00000003/manifest.json", "{\"step\": 99, " + saved.substr(1));
  j["run"]["resume"] = path("ck/step-00000003");
  EXPECT_NE(refused(j).find(manifest + " is not valid JSON: duplicate key 'step' in the top level"), std::string::npos);
}

// With --log-format json every line is JSON whatever bytes a message
// carries: a `latest` that is not UTF-8 becomes U+FFFD in the error event.
TEST_F(WorkerTest, JsonErrorsStayJsonForAnyMessageBytes) {
  nlohmann::json j = checkpointed_job(path("ck"));
  ASSERT_EQ(run({"--config", job(j)}).code, kExitOk);
  write("ck/latest", "\xff\xfe step");
  j["run"]["resume"] = "latest";
  const Result r = run({"--config", job(j)});
  EXPECT_EQ(r.code, kExitBadInput) << r.err;
  const auto errors = of_kind(events(r.out), "error");
  ASSERT_EQ(errors.size(), 1u) << r.out;
  EXPECT_NE(errors[0]["message"].get<std::string>().find("\xef\xbf\xbd\xef\xbf\xbd step"), std::string::npos)
      << errors[0];
}

TEST_F(WorkerTest, JsonOutputHasStartStepsAndSummary) {
  const Result r = run({"--config", job(small_job()), "--log-format", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  std::vector<nlohmann::json> events;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) events.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(events.size(), 6u);  // start, 4 steps, summary
  EXPECT_EQ(events[0]["event"], "start");
  EXPECT_EQ(events[0]["world_size"], 1);
  EXPECT_EQ(events[0]["device"], "cpu");
  EXPECT_EQ(events[0]["params"], 120576);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(events[i]["event"], "step");
    EXPECT_EQ(events[i]["step"], i);
    for (const char* k : {"loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"})
      EXPECT_TRUE(events[i][k].is_number()) << k;
    EXPECT_TRUE(events[i]["loss_scale"].is_null());
  }
  const nlohmann::json& s = events[5];
  EXPECT_EQ(s["event"], "summary");
  EXPECT_EQ(s["steps"], 4);
  EXPECT_EQ(s["first_loss"], events[1]["loss"]);
  EXPECT_EQ(s["final_loss"], events[4]["loss"]);
  EXPECT_TRUE(s["synthetic_accuracy"].is_number());
  // From the worker's start, which the steps' clock follows: at least the
  // first step's elapsed time.
  ASSERT_TRUE(s["time_to_first_step_s"].is_number()) << s;
  EXPECT_GE(s["time_to_first_step_s"].get<double>(), events[1]["elapsed_s"].get<double>());
  // Where the time before the first step went: parts of ready_s, which is
  // part of the time to the first step; a CPU run pins nothing.
  const nlohmann::json& up = s["startup"];
  ASSERT_TRUE(up.is_object()) << s;
  double parts = 0;
  for (const char* k : {"device_s", "plan_s", "build_s", "resume_s"}) {
    ASSERT_TRUE(up[k].is_number()) << k;
    EXPECT_GE(up[k].get<double>(), 0.0) << k;
    parts += up[k].get<double>();
  }
  EXPECT_LE(parts, up["ready_s"].get<double>());
  // The draws of gpt2-tiny's weights are part of the build.
  ASSERT_TRUE(up["init_s"].is_number());
  EXPECT_GT(up["init_s"].get<double>(), 0.0);
  EXPECT_LE(up["init_s"].get<double>(), up["build_s"].get<double>());
  EXPECT_LE(up["ready_s"].get<double>(), s["time_to_first_step_s"].get<double>());
  for (const char* k : {"pinned_bytes", "pin_registered_bytes"}) EXPECT_EQ(up[k], 0) << k;
  for (const char* k : {"pin_touch_s", "pin_register_s", "pin_wait_s", "first_step_pin_wait_s"}) {
    EXPECT_EQ(up[k], 0.0) << k;
  }
  // gpt2-tiny has 120576 fp32 parameters: 4 bytes each of params and grads, 8 of Adam state.
  EXPECT_EQ(s["memory_peak"]["host"]["params"], 120576 * 4);
  EXPECT_EQ(s["memory_peak"]["host"]["grads"], 120576 * 4);
  EXPECT_EQ(s["memory_peak"]["host"]["optimizer"], 120576 * 8);
  EXPECT_EQ(s["memory_peak"]["gpu"]["params"], 0);
  EXPECT_EQ(s["memory_peak_per_rank"].size(), 1u);
}

TEST_F(WorkerTest, SameSeedPrintsIdenticalLosses) {
  const std::string cfg = job(small_job());
  auto losses = [&](const Result& r) {
    std::vector<std::string> v;
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) {
      auto e = nlohmann::json::parse(l);
      if (e["event"] == "step") v.push_back(e["loss"].dump());  // printed text, compared exactly
    }
    return v;
  };
  const auto a = losses(run({"--config", cfg, "--log-format", "json"}));
  const auto b = losses(run({"--config", cfg, "--log-format", "json"}));
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
}

TEST_F(WorkerTest, TextOutputShowsProgressSampleAndMemoryTable) {
  const Result r = run({"--config", job(small_job())});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  for (const char* s : {"zerod: model gpt2-tiny", "ready ", "s after start: device ", ", build ", "step 4/4 | loss",
                        "tok/s", "ETA", "done: 4 steps", "first step done",
                        "synthetic accuracy", "sample:", "memory peak (rank 0)", "host"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  EXPECT_LT(r.out.find("ready "), r.out.find("step 4/4"));
}

TEST(RunOutputTest, ReadySaysWhereTheStartWent) {
  StartupTimes t;
  t.ready_s = 12.34;
  t.device_s = 0.61;
  t.plan_s = 0.12;
  t.build_s = 11.5;
  t.init_s = 3.14;
  t.pinning = {uint64_t{3} << 30, uint64_t{1} << 30, 1.3, 4.5, 0.31};
  std::ostringstream out, err;
  RunOutput(LogFormat::kText, out, err).ready(t);
  EXPECT_EQ(out.str(),
            "ready 12.3s after start: device 0.6s, plan 0.1s, build 11.5s (initial weights 3.1s; 3.0 GiB of host "
            "memory pinned: pages touched 1.3s; 1.0 GiB registered so far in 4.5s, copies waited 0.3s)\n");
  t.pinning = {uint64_t{3} << 30, 0, 1.3, 0, 0};
  std::ostringstream none;
  RunOutput(LogFormat::kText, none, err).ready(t);
  EXPECT_EQ(none.str(),
            "ready 12.3s after start: device 0.6s, plan 0.1s, build 11.5s (initial weights 3.1s; 3.0 GiB of host "
            "memory pinned: pages touched 1.3s; none registered yet, copies waited 0.0s)\n");
  t.pinning = {};
  t.resume_s = 2.0;
  std::ostringstream out2;
  RunOutput(LogFormat::kText, out2, err).ready(t);
  EXPECT_EQ(out2.str(),
            "ready 12.3s after start: device 0.6s, plan 0.1s, build 11.5s (initial weights 3.1s), resume 2.0s\n");
  std::ostringstream json;
  RunOutput(LogFormat::kJson, json, err).ready(t);  // in the summary instead
  EXPECT_EQ(json.str(), "");
}

TEST(RunOutputTest, DoneSaysWhatTheFirstStepWaitedForPinning) {
  RunSummary s;
  s.steps = 4;
  s.elapsed_s = 9.0;
  s.first_loss = 11.0;
  s.final_loss = 8.0;
  s.tokens_per_s = 1000;
  s.time_to_first_step_s = 7.04;
  s.startup = StartupTimes{};
  s.startup->first_step_pin_wait_s = 0;
  const std::string done = "done: 4 steps in 9.0s | loss 11.000000 -> 8.000000 | 1000 tok/s | first step done 7.0s after start";
  auto text = [&] {
    std::ostringstream out, err;
    RunOutput(LogFormat::kText, out, err).summary(s, {MemoryPeaks{}});
    return out.str();
  };
  EXPECT_NE(text().find(done + "\n"), std::string::npos) << text();  // nothing pinned
  s.startup->pinning.bytes = uint64_t{24} << 30;
  s.startup->first_step_pin_wait_s = 1.26;
  EXPECT_NE(text().find(done + " (its copies waited 1.3s for pinned memory's registration)\n"), std::string::npos)
      << text();
}

TEST_F(WorkerTest, SetOverridesKeys) {
  const Result r = run({"--config", job(small_job()), "--set", "run.steps=2", "--log-format", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("\"steps\":2"), std::string::npos);
}

TEST_F(WorkerTest, UnknownKey) {
  nlohmann::json j = small_job();
  j["zero_optimization"] = {{"stage", 1}, {"bucket", 5}};
  EXPECT_NE(refused(j).find("unknown key 'zero_optimization.bucket'"), std::string::npos);
}

TEST_F(WorkerTest, InconsistentBatchSizes) {
  nlohmann::json j = small_job();
  j["train_micro_batch_size_per_gpu"] = 3;
  j["gradient_accumulation_steps"] = 1;
  EXPECT_NE(refused(j).find("inconsistent batch sizes"), std::string::npos);
}

TEST_F(WorkerTest, NegativeLearningRate) {
  nlohmann::json j = small_job();
  j["optimizer"]["params"]["lr"] = -0.1;
  EXPECT_NE(refused(j).find("optimizer.params.lr: must not be negative"), std::string::npos);
}

// Without a GPU, run.device 'cuda' is refused naming why; on a machine with
// one, a rank whose local rank is past the visible GPUs shares GPU
// local_rank % count and trains there.
TEST_F(WorkerTest, CudaWithoutAGpuIsRefusedAndRanksPastTheGpusShareThem) {
  nlohmann::json j = small_job();
  j["run"]["device"] = "cuda";
  const int gpus = cuda_device_count();
  if (gpus == 0) {
    const std::string err = refused(j);
    EXPECT_NE(err.find("run.device 'cuda'"), std::string::npos) << err;
    EXPECT_NE(err.find("use 'cpu' or 'auto'"), std::string::npos) << err;
    return;
  }
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_RANK", std::to_string(gpus).c_str(), 1);
  const Result r = run({"--config", job(j), "--log-format", "json"});
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK"}) unsetenv(name);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  // "cuda:0 (NVIDIA H100 80GB HBM3)": GPU 0 and its name.
  const std::string device = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["device"];
  EXPECT_EQ(device.rfind("cuda:0 (", 0), 0u) << r.out;
}

TEST_F(WorkerTest, PresetThatDoesNotExist) {
  nlohmann::json j = small_job();
  j["model"]["preset"] = "gpt5";
  EXPECT_NE(refused(j).find("model.preset 'gpt5' does not exist"), std::string::npos);
}

TEST_F(WorkerTest, MissingDataFile) {
  const std::string missing = path("none.bin");
  EXPECT_NE(refused(with_data("tokens", missing)).find(missing), std::string::npos);
}

TEST_F(WorkerTest, TruncatedDataFile) {
  const std::string f = path("short.bin");
  ASSERT_TRUE(write_token_shard(f, std::vector<uint16_t>(100, 7)).ok());
  std::filesystem::resize_file(f, 1024 + 100);  // header says 100 tokens, 50 remain
  const std::string err = refused(with_data("tokens", f));
  EXPECT_NE(err.find(f), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
}

TEST_F(WorkerTest, WrongMagic) {
  std::string bytes(1024 + 200, '\0');
  const int32_t header[3] = {20240326, 1, 100};  // an llm.c model file, not a token shard
  std::memcpy(bytes.data(), header, sizeof header);
  const std::string f = write("model.bin", bytes);
  const std::string err = refused(with_data("tokens", f));
  EXPECT_NE(err.find("magic 20240326"), std::string::npos) << err;
}

TEST_F(WorkerTest, MissingConfigFileAndBadArguments) {
  EXPECT_EQ(run({"--config", path("nope.json")}).code, kExitBadInput);
  EXPECT_EQ(run({}).code, kExitBadInput);
  EXPECT_EQ(run({"--config", job(small_job()), "--log-format", "xml"}).code, kExitBadInput);
  const Result bad_set = run({"--config", job(small_job()), "--set", "run.steps"});
  EXPECT_EQ(bad_set.code, kExitBadInput);
  EXPECT_NE(bad_set.err.find("expected key.path=value"), std::string::npos);
}

TEST_F(WorkerTest, RankVariablesWithoutAnMpiWorldAreRefusedClearly) {
  // The variables say two ranks, but no mpirun started this process.
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  const std::string err = refused(small_job());
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_NE(err.find("rank 0 of 2"), std::string::npos) << err;
  EXPECT_NE(err.find("mpirun"), std::string::npos) << err;
}

#ifdef ZEROD_WITH_MPI
TEST_F(WorkerTest, RunsAsTwoRanksUnderMpirunFollowingOneProcess) {
  const std::string config = job(small_job());
  const Result single = run({"--config", config, "--log-format", "json"});
  ASSERT_EQ(single.code, kExitOk) << single.err;
  const std::vector<nlohmann::json> one = events(single.out);
  const nlohmann::json& one_peak = one.back()["memory_peak"]["host"];
  for (int stage : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    const CommandResult r =
        mpirun(2, absl::StrCat("--config ", config, " --log-format json --set zero_optimization.stage=", stage,
                               " --set zero_optimization.stage3_param_persistence_threshold=0"));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<nlohmann::json> two = events(r.out);
    // Rank 0 alone prints: start, 4 steps, summary.
    ASSERT_EQ(two.size(), 6u) << r.out;
    EXPECT_EQ(two[0]["world_size"], 2);
    EXPECT_EQ(two[0]["zero_stage"], stage);
    for (int i = 1; i <= 4; ++i) {
      EXPECT_NEAR(two[i]["loss"].get<double>(), one[i]["loss"].get<double>(), 1e-5 * one[i]["loss"].get<double>());
    }
    const nlohmann::json& per_rank = two.back()["memory_peak_per_rank"];
    ASSERT_EQ(per_rank.size(), 2u);
    EXPECT_EQ(per_rank[0], two.back()["memory_peak"]);
    for (const nlohmann::json& rank : per_rank) {
      // m and v for half the model each (the rank's own fp32 parameters are
      // its master weights) against the world of one's m and v for all of it.
      const double ratio = rank["host"]["optimizer"].get<double>() / one_peak["optimizer"].get<double>();
      EXPECT_NEAR(ratio, 0.5, 0.02);
    }
  }
}

// Two ranks under stage 3 save every 3 steps; resumed from step 3 they
// continue bitwise (other world sizes: test_checkpoint_reshard.cc).
TEST_F(WorkerTest, TwoRanksCheckpointAndResumeBitwise) {
  nlohmann::json j = checkpointed_job(path("ck"));
  j["zero_optimization"] = {{"stage", 3}, {"stage3_param_persistence_threshold", 0}};
  const CommandResult a = mpirun(2, "--config " + job(j));
  ASSERT_EQ(a.code, 0) << a.out;
  const auto steps = of_kind(events(a.out), "step");
  ASSERT_EQ(steps.size(), 6u) << a.out;
  ASSERT_EQ(of_kind(events(a.out), "checkpoint").size(), 2u) << a.out;
  EXPECT_TRUE(std::filesystem::exists(path("ck/step-00000003/rank-00001.safetensors")));

  nlohmann::json b = j;
  b["run"]["checkpoint"]["dir"] = path("ck-b");
  b["run"]["resume"] = path("ck/step-00000003");
  const CommandResult rb = mpirun(2, "--config " + write("b.json", b.dump()));
  ASSERT_EQ(rb.code, 0) << rb.out;
  const auto later = of_kind(events(rb.out), "step");
  ASSERT_EQ(later.size(), 3u) << rb.out;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(later[i]["loss"], steps[3 + i]["loss"]) << "step " << 4 + i;
}

// An update of 1e30 makes the next step's gradients overflow on every rank.
TEST_F(WorkerTest, AFailureOnEveryRankEndsTheMpirunJob) {
  nlohmann::json j = small_job();
  j["optimizer"]["params"]["lr"] = 1e30;
  const CommandResult r = mpirun(2, "--config " + job(j));
  EXPECT_EQ(r.code, kExitFailure) << r.out;
  EXPECT_NE(r.out.find("gradients are not finite at step 2"), std::string::npos) << r.out;
}
#endif  // ZEROD_WITH_MPI

// A job past run.host_memory_limit is refused before anything is
// allocated, with the plan's figures: the tier, the bytes, the shortfall,
// what takes them, and what set the size.
TEST_F(WorkerTest, AJobPastTheHostMemoryLimitIsRefusedBeforeItStarts) {
  nlohmann::json j = small_job();
  j["run"]["host_memory_limit"] = "1MiB";
  const Result r = run({"--config", job(j), "--log-format", "json"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_TRUE(testing::of_kind(testing::events(r.out), "start").empty()) << r.out;
  MemoryPlan plan;
  ASSERT_TRUE(Trainer::plan(testing::config_with(j, {}), 1, 0, cpu_kernel_memory(), plan).ok());
  const MemoryPeaks p = plan.peaks();
  const int host = static_cast<int>(Tier::kHost);
  const uint64_t need = p.total[host];
  ASSERT_GT(need, uint64_t{1} << 20);
  // The categories follow, largest first.
  const auto largest = std::ranges::max_element(p.peak[host]) - p.peak[host].begin();
  EXPECT_NE(r.err.find(absl::StrCat(
                "run.host_memory_limit is 1048576 bytes (1.0 MiB), but rank 0 would hold ", need, " bytes (",
                byte_size_text(need), ") of host memory, ", byte_size_text(need - (uint64_t{1} << 20)), " more: ",
                category_name(static_cast<Category>(largest)), " ", byte_size_text(p.peak[host][largest]), ", ")),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("; the model (model.preset 'gpt2-tiny', n_layer 2, n_embd 64, vocab_size 256) has 120576 "
                       "parameters, at micro-batch "),
            std::string::npos)
      << r.err;
  // At exactly what the plan needs, it trains.
  j["run"]["host_memory_limit"] = need;
  const Result fits = run({"--config", job(j)});
  EXPECT_EQ(fits.code, kExitOk) << fits.err;
}

// The banner says how zero_optimization.micro_batch_grads moves a step's
// micro-batches at stage 2 (on the CPU, whose memory is the host's, "auto"
// is "fp32" with nothing kept on the device), and the JSON start event
// names the value it resolved to; nothing is said where each is added in
// fp32 in memory.
TEST_F(WorkerTest, TheBannerSaysHowMicroBatchGradientsAreSummed) {
  nlohmann::json j = small_job();
  j["train_batch_size"] = 8;
  j["train_micro_batch_size_per_gpu"] = 4;
  j["bf16"] = {{"enabled", true}};
  const std::string line = "  micro-batch gradients (micro_batch_grads ";
  const std::pair<nlohmann::json, std::string> cases[] = {
      {{{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}},
       "fp32): each micro-batch's sent to the host in fp32, summed there in fp32\n"},
      {{{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}}}, {"micro_batch_grads", "compute"}},
       "compute): each micro-batch's sent to the host in bf16, summed there in fp32\n"},
      {{{"stage", 3}, {"micro_batch_grads", "compute"}},
       "compute): rounded to bf16 each micro-batch, summed in fp32\n"},
      {{{"stage", 2}}, ""}};
  for (const auto& [zero, said] : cases) {
    SCOPED_TRACE(zero.dump());
    j["zero_optimization"] = zero;
    const Result text = run({"--config", job(j)});
    ASSERT_EQ(text.code, kExitOk) << text.err;
    if (said.empty()) {
      EXPECT_EQ(text.out.find(line), std::string::npos) << text.out;
    } else {
      EXPECT_NE(text.out.find(line + said), std::string::npos) << text.out;
    }
    const Result json = run({"--config", job(j), "--log-format", "json"});
    ASSERT_EQ(json.code, kExitOk) << json.err;
    const auto starts = testing::of_kind(testing::events(json.out), "start");
    ASSERT_EQ(starts.size(), 1u);
    EXPECT_EQ(starts[0]["micro_batch_grads"], zero.contains("micro_batch_grads") ? "compute" : "fp32");
    EXPECT_FALSE(starts[0].contains("micro_batch_grads_auto"));
  }
}

TEST_F(WorkerTest, TheBinaryExitsWithTheSameCodes) {
  auto status = [](const std::string& cmd) {
    const int s = std::system((cmd + " > /dev/null 2>&1").c_str());
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  };
  nlohmann::json bad = small_job();
  bad["nonsense"] = 1;
  EXPECT_EQ(status(std::string(ZEROD_WORKER_BIN) + " --config " + job(small_job())), 0);
  EXPECT_EQ(status(std::string(ZEROD_WORKER_BIN) + " --config " + write("bad.json", bad.dump())), 2);
}

}  // namespace
}  // namespace zerod
