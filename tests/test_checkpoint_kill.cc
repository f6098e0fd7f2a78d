// A rank SIGKILLed at random points of a save, many times: afterwards the
// checkpoint `latest` names is always complete, every file matches the
// manifest, and a trainer resumes from it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/trainer.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

#ifdef ZEROD_WITH_MPI

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A 1.3M-parameter model saved after every step (each save some 16 MB over
// 2 ranks), so that a save is under way most of the time.
nlohmann::json job(const std::string& root) {
  return {{"model", {{"n_layer", 4}, {"n_head", 4}, {"n_embd", 128}, {"vocab_size", 256}, {"block_size", 32}}},
          {"data", {{"kind", "synthetic"}, {"seq_len", 32}}},
          {"run", {{"steps", 100000}, {"seed", 5}, {"device", "cpu"}, {"checkpoint", {{"dir", root}, {"interval", 1}, {"keep", 2}}}}},
          {"train_batch_size", 4},
          {"train_micro_batch_size_per_gpu", 2},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
          {"zero_optimization", {{"stage", 3}}}};
}

// mpirun, which starts each rank as its child.
pid_t start_mpirun(int np, const std::string& config, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    const std::string n = std::to_string(np);
    freopen(log.c_str(), "w", stdout);
    dup2(STDOUT_FILENO, STDERR_FILENO);
    execl(ZEROD_MPIEXEC, ZEROD_MPIEXEC, "-np", n.c_str(), "--oversubscribe", "-x", "OMP_NUM_THREADS=1",
          ZEROD_WORKER_BIN, "--config", config.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// The live zero-worker processes whose parent is `parent`.
std::vector<pid_t> workers(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid pgrp ...
    const size_t close = line.rfind(')');
    if (close == std::string::npos || line.find("(zero-worker)") == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent && state != "Z") out.push_back(std::stoi(name));
  }
  return out;
}

bool any_tmp(const std::string& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (e.path().extension() == ".tmp") return true;
  }
  return false;
}

class CheckpointKillTest : public testing::TempDirTest {};

TEST_F(CheckpointKillTest, LatestAlwaysLoadsAfterARankIsKilledMidSave) {
  constexpr int kRounds = 20;
  const std::string root = path("ck"), config = write("job.json", job(root).dump());
  std::mt19937 rng(12345);
  int mid_save = 0;  // rounds whose kill landed while a save's directory was open
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const pid_t mpirun = start_mpirun(2, config, path("log"));
    // Past the first checkpoint of this round, then into a save, then a
    // random moment of it.
    const std::string before = fs::exists(root + "/latest") ? latest_checkpoint(root).value_or("") : "";
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline && latest_checkpoint(root).value_or(before) == before) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    while (Clock::now() < deadline && !any_tmp(root)) std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 20000)(rng)));
    const std::vector<pid_t> ranks = workers(mpirun);
    ASSERT_EQ(ranks.size(), 2u) << "the job ended early; see " << path("log");
    mid_save += any_tmp(root);
    kill(ranks[std::uniform_int_distribution<size_t>(0, 1)(rng)], SIGKILL);
    // mpirun ends the job when a rank dies; anything left is killed.
    int status = 0;
    for (int i = 0; i < 3000 && waitpid(mpirun, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (pid_t p : ranks) kill(p, SIGKILL);
    kill(mpirun, SIGKILL);
    waitpid(mpirun, &status, 0);

    auto latest = latest_checkpoint(root);
    ASSERT_TRUE(latest.ok()) << latest.status();
    auto m = read_manifest(*latest);
    ASSERT_TRUE(m.ok()) << m.status();
    for (const ManifestFile& f : m->files) EXPECT_TRUE(verify_file(f).ok()) << verify_file(f);
    auto t = testing::make_trainer(testing::config_with(job(root), {}));
    ASSERT_TRUE(t.ok()) << t.status();
    const absl::Status s = (*t)->resume(*latest);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ((*t)->steps_done(), m->json["step"].get<int64_t>());
  }
  // Most kills land inside a save (its directory open when the signal went).
  std::printf("%d of %d kills landed during a save\n", mid_save, kRounds);
  EXPECT_GT(mid_save, 0);
}

#endif  // ZEROD_WITH_MPI

}  // namespace
}  // namespace zerod
