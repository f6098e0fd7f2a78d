// Exit statuses by failure kind (runtime/core/exit_codes.h): bad input is
// 2, a failure of the run 1. Every status kind and the errnos file I/O
// meets against the README's table, then real failures of each kind in
// zero-worker: before the first step, during the run, and in export.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/whole_file.h"
#include "runtime/engine/worker.h"
#include "tests/temp_dir.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;
using C = absl::StatusCode;

TEST(ExitCodes, EveryStatusKindHasItsStatus) {
  const std::vector<std::pair<C, int>> table = {
      {C::kOk, 0},
      // The caller can fix these by giving something else.
      {C::kInvalidArgument, 2},
      {C::kNotFound, 2},
      {C::kAlreadyExists, 2},
      {C::kPermissionDenied, 2},
      {C::kFailedPrecondition, 2},
      {C::kOutOfRange, 2},
      {C::kUnimplemented, 2},
      {C::kUnauthenticated, 2},
      {C::kDataLoss, 2},
      // The run's: I/O, memory, peers, timeouts, bugs.
      {C::kCancelled, 1},
      {C::kUnknown, 1},
      {C::kDeadlineExceeded, 1},
      {C::kResourceExhausted, 1},
      {C::kAborted, 1},
      {C::kInternal, 1},
      {C::kUnavailable, 1},
  };
  std::set<C> seen;
  for (const auto& [code, exit] : table) {
    EXPECT_EQ(exit_code_for(code), exit) << absl::StatusCodeToString(code);
    EXPECT_EQ(exit_code_for(absl::Status(code, "x")), exit) << absl::StatusCodeToString(code);
    seen.insert(code);
  }
  EXPECT_EQ(seen.size(), 17u);  // every code absl has
}

// Errors from errno keep its kind: a path refused is bad input, a disk
// failing or full is the run's.
TEST(ExitCodes, ErrnoKindsOfFileIo) {
  const std::vector<std::pair<int, int>> table = {
      {ENOENT, 2}, {EACCES, 2}, {EPERM, 2},  {EROFS, 2},  {EISDIR, 2}, {ENOTDIR, 2}, {ENAMETOOLONG, 2},
      {EIO, 1},    {ENOSPC, 1}, {EDQUOT, 1}, {ENOMEM, 1}, {EMFILE, 1}, {ENFILE, 1},
  };
  for (const auto& [err, exit] : table) {
    EXPECT_EQ(exit_code_for(absl::ErrnoToStatus(err, "open x")), exit) << std::strerror(err);
  }
}

nlohmann::json small_job() {
  return {{"model", {{"preset", "gpt2-tiny"}}},
          {"data", {{"kind", "synthetic"}, {"seq_len", 16}}},
          {"run", {{"steps", 4}, {"seed", 3}, {"device", "cpu"}}},
          {"train_batch_size", 4},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}}};
}

// Fails transfers of files whose path holds `part` (reads or writes) with `err`.
IoFaultHook failing_transfers(const std::string& part, bool writes, int err) {
  IoFaultHook h;
  h.on_complete = [=](bool write, const std::string& path, uint64_t, uint32_t, int result) {
    return write == writes && path.find(part) != std::string::npos ? -err : result;
  };
  return h;
}

// Fails opens of files whose path holds `part` with `err`.
IoFaultHook failing_opens(const std::string& part, int err) {
  IoFaultHook h;
  h.on_open = [=](const std::string& path, int) { return path.find(part) != std::string::npos ? err : 0; };
  return h;
}

class ExitCodesWorker : public testing::TempDirTest {
 protected:
  std::string job(const std::string& name, const nlohmann::json& j) { return write(name + ".json", j.dump()); }
};

// One real failure of each kind, each with the status it exits with and
// the words its message must hold.
TEST_F(ExitCodesWorker, FailureKindsAgainstExitStatuses) {
  // A run that leaves a checkpoint at step 3, and copies of it to spoil.
  nlohmann::json saving = small_job();
  saving["run"]["checkpoint"] = {{"dir", path("ck")}, {"interval", 3}};
  ASSERT_EQ(testing::run_worker_with({"--config", job("saving", saving)}).code, kExitOk);
  const std::string saved = path("ck/step-00000003");
  fs::copy(saved, path("edited"));
  nlohmann::json manifest = nlohmann::json::parse(*read_whole_file(saved + "/manifest.json"));
  manifest["step"] = 2;
  write("edited/manifest.json", manifest.dump());
  fs::copy(saved, path("flipped"));
  {
    std::fstream f(path("flipped/rank-00000.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  const auto resuming = [&](const std::string& dir) {
    nlohmann::json j = small_job();
    j["run"]["resume"] = dir;
    return j;
  };
  fs::create_directories(path("a-directory"));
  write("plain-file", "x");
  nlohmann::json offloaded = small_job();
  fs::create_directories(path("nvme"));
  offloaded["zero_optimization"] = {{"stage", 1},
                                    {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", path("nvme")}}}};

  struct Case {
    std::string what;
    nlohmann::json config;
    TrainerEnv env;
    int code;
    std::string message;
  };
  const auto with = [](nlohmann::json j, const std::string& pointer, nlohmann::json value) {
    j[nlohmann::json::json_pointer(pointer)] = std::move(value);
    return j;
  };
  const nlohmann::json data_at = {{"kind", "text"}, {"seq_len", 16}};
  const std::vector<Case> cases = {
      // Before the first step.
      {"a key that does not exist", with(small_job(), "/nonsense", 1), {}, 2, "nonsense"},
      {"a data file that does not exist",
       with(small_job(), "/data", with(data_at, "/path", path("none.txt"))),
       {},
       2,
       "does not exist"},
      {"a data path that is a directory",
       with(small_job(), "/data", with(data_at, "/path", path("a-directory"))),
       {},
       2,
       "Is a directory"},
      // Reading address 0 of /proc/self/mem is a real EIO from the kernel.
      {"a data file whose device fails",
       with(small_job(), "/data", with(data_at, "/path", "/proc/self/mem")),
       {},
       1,
       "Input/output error"},
      {"a checkpoint dir that is a file",
       with(small_job(), "/run/checkpoint", {{"dir", path("plain-file")}}),
       {},
       2,
       "is not a directory"},
      {"an nvme_path that does not exist",
       with(offloaded, "/zero_optimization/offload_optimizer/nvme_path", path("no-nvme")),
       {},
       2,
       "does not exist"},
      {"a model past run.host_memory_limit",
       with(small_job(), "/run/host_memory_limit", "1MiB"),
       {},
       2,
       "run.host_memory_limit is 1048576 bytes (1.0 MiB), but rank 0 would hold"},
      {"gradients that stop being finite",
       with(small_job(), "/optimizer/params/lr", 1e30),
       {},
       1,
       "gradients are not finite at step 2"},
      {"a checkpoint edited by hand", resuming(path("edited")), {}, 2, "checksum"},
      {"a checkpoint shard whose bytes changed", resuming(path("flipped")), {}, 2, "checksum or size does not match"},
      {"a checkpoint shard that may not be opened",
       resuming(saved),
       {failing_opens("rank-00000", EACCES)},
       2,
       "Permission denied"},
      {"a checkpoint shard whose device fails",
       resuming(saved),
       {failing_transfers("rank-00000", false, EIO)},
       1,
       "Input/output error"},
      // During the run: every failure is the run's.
      {"a disk that fills under a checkpoint",
       with(saving, "/run/checkpoint/dir", path("ck-full")),
       {failing_transfers("rank-00000", true, ENOSPC)},
       1,
       "No space left on device"},
      {"a checkpoint file that may not be created",
       with(saving, "/run/checkpoint/dir", path("ck-denied")),
       {failing_opens("rank-00000", EACCES)},
       1,
       "Permission denied"},
      {"an offload device that fails",
       offloaded,
       {failing_transfers(path("nvme"), false, EIO)},
       1,
       "Input/output error"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const testing::WorkerResult r = testing::run_worker_with({"--config", job("case", c.config)}, c.env);
    EXPECT_EQ(r.code, c.code) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }

  // Export: what it is given, and where it writes.
  struct Export {
    std::string what, checkpoint, out;
    int code;
    std::string message;
  };
  const std::vector<Export> exports = {
      {"export of a checkpoint that does not exist", path("none"), path("hf"), 2, path("none")},
      {"export of a checkpoint edited by hand", path("edited"), path("hf"), 2, "checksum"},
      {"export to an --out that is a file", saved, path("plain-file"), 2, path("plain-file")},
  };
  for (const Export& e : exports) {
    SCOPED_TRACE(e.what);
    const testing::WorkerResult r = testing::run_worker_with({"export", "--checkpoint", e.checkpoint, "--out", e.out});
    EXPECT_EQ(r.code, e.code) << r.err;
    EXPECT_NE(r.err.find(e.message), std::string::npos) << r.err;
  }
}

#ifdef ZEROD_WITH_MPI
// Ranks check their own share of a checkpoint's files; one finding its
// shard spoilt makes every rank fail with the same status, so mpirun's is
// the same whichever rank aborts first.
TEST_F(ExitCodesWorker, RanksAgreeOnTheStatusOfAFailedResume) {
  nlohmann::json j = small_job();
  j["zero_optimization"] = {{"stage", 1}};
  j["run"]["checkpoint"] = {{"dir", path("ck")}, {"interval", 3}};
  const testing::CommandResult saving = testing::mpirun(2, "--config " + job("saving", j));
  ASSERT_EQ(saving.code, kExitOk) << saving.out;
  {
    std::fstream f(path("ck/step-00000003/rank-00001.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  j["run"]["resume"] = path("ck/step-00000003");
  j["run"]["checkpoint"]["dir"] = path("ck-resumed");
  for (int attempt = 0; attempt < 3; ++attempt) {
    const testing::CommandResult r = testing::mpirun(2, "--config " + job("resume", j));
    EXPECT_EQ(r.code, kExitBadInput) << r.out;
    EXPECT_NE(r.out.find("rank-00001.safetensors: checksum or size does not match"), std::string::npos) << r.out;
  }
}
#endif  // ZEROD_WITH_MPI

}  // namespace
}  // namespace zerod
