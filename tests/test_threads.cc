// The CPU threads a worker chooses (the CPUs it may use, shared among the
// ranks on its node, unless OMP_NUM_THREADS or run.threads says), and a
// run's bits at any thread count.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/rank_env.h"
#include "runtime/core/whole_file.h"
#include "runtime/kernels/cpu/threads.h"
#include "tests/temp_dir.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

// Sets an environment variable for a scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Threads, ACgroupQuotaIsWholeCpusRoundedUp) {
  EXPECT_EQ(cpus_of_quota("max 100000"), std::nullopt);
  EXPECT_EQ(cpus_of_quota("100000 100000"), 1);
  EXPECT_EQ(cpus_of_quota("150000 100000"), 2);
  EXPECT_EQ(cpus_of_quota("50000 100000"), 1);
  EXPECT_EQ(cpus_of_quota("400000 100000\n"), 4);
  EXPECT_EQ(cpus_of_quota("-1 100000"), std::nullopt);  // cgroup v1's "no limit"
  EXPECT_EQ(cpus_of_quota("garbage"), std::nullopt);
}

// A thread pinned to one CPU may use one.
TEST(Threads, UsableCpusFollowTheAffinityMask) {
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_GE(usable_cpus(), 1);
  EXPECT_LE(usable_cpus(), online);
  int pinned = 0;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    cpu_set_t mine;
    ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mine)) {
        CPU_SET(c, &one);
        break;
      }
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    pinned = usable_cpus();
  }).join();
  EXPECT_EQ(pinned, 1);
}

TEST(Threads, TheEnvironmentThenTheConfigThenTheNodesCpusPerRank) {
  {
    ScopedEnv env("OMP_NUM_THREADS", "3,1");
    const ThreadChoice c = choose_threads(/*configured=*/5, /*local_ranks=*/2);
    EXPECT_EQ(c.threads, 3);
    EXPECT_EQ(c.why, "OMP_NUM_THREADS");
  }
  ScopedEnv unset("OMP_NUM_THREADS", nullptr);
  const ThreadChoice configured = choose_threads(5, 2);
  EXPECT_EQ(configured.threads, 5);
  EXPECT_EQ(configured.why, "run.threads");
  const int cpus = usable_cpus();
  const ThreadChoice alone = choose_threads(0, 1);
  EXPECT_EQ(alone.threads, cpus);
  EXPECT_EQ(alone.why, absl::StrCat(cpus, cpus == 1 ? " CPU" : " CPUs", " / 1 rank on this node"));
  EXPECT_EQ(choose_threads(0, 2).threads, std::max(1, cpus / 2));
  EXPECT_EQ(choose_threads(0, 4 * cpus).threads, 1);  // more ranks than CPUs: one each
}

TEST(Threads, RanksOnTheNodeComeFromTheLauncher) {
  {
    ScopedEnv r("OMPI_COMM_WORLD_RANK", "1"), s("OMPI_COMM_WORLD_SIZE", "4"), l("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    EXPECT_EQ(discover_rank()->local_size, 2);
  }
  {
    ScopedEnv r("RANK", "0"), s("WORLD_SIZE", "3"), l("LOCAL_WORLD_SIZE", nullptr);
    EXPECT_EQ(discover_rank()->local_size, 3);  // unsaid: every rank counts as local
  }
  EXPECT_EQ(discover_rank()->local_size, 1);
}

#ifdef ZEROD_WITH_MPI
class ThreadCountRun : public testing::TempDirTest {
 protected:
  // Trains 6 steps with `threads` CPU threads (as one process, or `np`
  // ranks under mpirun at stage 2) and saves at the end: the step losses,
  // the start event's thread count, and every shard file's bytes.
  struct Run {
    std::vector<double> losses;
    int threads = 0;
    std::vector<std::string> shards;
  };
  Run run(int np, int threads) {
    const std::string dir = path(absl::StrCat("ck-", np, "-", threads));
    nlohmann::json j = {{"model", {{"preset", "gpt2-tiny"}}},
                        {"data", {{"kind", "synthetic"}, {"seq_len", 32}}},
                        {"run",
                         {{"steps", 6},
                          {"device", "cpu"},
                          {"log_format", "json"},
                          {"sample", {{"tokens", 0}}},
                          {"checkpoint", {{"dir", dir}}}}},
                        {"train_batch_size", 8},
                        {"steps_per_print", 1},
                        {"gradient_clipping", 1.0},
                        {"zero_optimization", {{"stage", np > 1 ? 2 : 0}}},
                        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.1}}}}}};
    const std::string config = write(absl::StrCat("job-", np, "-", threads, ".json"), j.dump());
    const std::string env = absl::StrCat("OMP_NUM_THREADS=", threads);
    const testing::CommandResult r =
        np == 1 ? testing::run_command(absl::StrCat(env, " ", ZEROD_WORKER_BIN, " --config ", config, " 2>&1"))
                : testing::run_command(absl::StrCat(
                      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ", env, " ", ZEROD_MPIEXEC, " -np ",
                      np, " --oversubscribe -x ", "OMP_NUM_THREADS ", ZEROD_WORKER_BIN, " --config ", config, " 2>&1"));
    EXPECT_EQ(r.code, 0) << r.out;
    Run out;
    const auto all = testing::events(r.out);
    for (const nlohmann::json& e : testing::of_kind(all, "step")) out.losses.push_back(e["loss"].get<double>());
    for (const nlohmann::json& e : testing::of_kind(all, "start")) out.threads = e["threads"].get<int>();
    for (int rank = 0; rank < np; ++rank) {
      out.shards.push_back(
          read_whole_file(absl::StrCat(dir, "/step-00000006/rank-0000", rank, ".safetensors")).value_or(""));
    }
    return out;
  }
};

// Every reduction splits its work by the data, not by the threads: the
// losses and the saved weights and Adam states are the same bits at 1, 2
// and 3 threads, in one process and in two ranks at stage 2.
TEST_F(ThreadCountRun, TheSameBitsAtAnyThreadCount) {
  for (int np : {1, 2}) {
    SCOPED_TRACE(absl::StrCat(np, " ranks"));
    const Run one = run(np, 1);
    ASSERT_EQ(one.losses.size(), 6u);
    ASSERT_FALSE(one.shards[0].empty());
    EXPECT_EQ(one.threads, 1);
    for (int threads : {2, 3}) {
      const Run other = run(np, threads);
      EXPECT_EQ(other.threads, threads);
      EXPECT_EQ(other.losses, one.losses) << threads << " threads";
      EXPECT_TRUE(other.shards == one.shards) << threads << " threads: the saved state differs";
    }
  }
}
#endif  // ZEROD_WITH_MPI

}  // namespace
}  // namespace zerod
