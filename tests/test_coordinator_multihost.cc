// zerod on the first of three hosts of this machine (tests/netns_hosts.h:
// each its own network, processes and /proc, reached over ssh), placing a
// job on two or three of them, mpirun reaching them through the agent
// zerod is given with --mca. zerod sees no process of another host: what
// happens there it learns from the ranks and their agents, and what it
// stops there it stops through mpirun and them. The ranks run on the hosts
// the job names and report them; a rank killed on the second host, by a
// signal or by the OOM killer of that host's cgroup, fails the attempt
// naming that host, and the job resumes from its checkpoint to the loss of
// the same job run straight through, with nothing of the failed attempt
// left on any host. Needs root and openssh-server.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/coordinator/job_store.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/core/whole_file.h"
#include "tests/netns_hosts.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"
#include "tests/zerod_process.h"

namespace zerod {
namespace {

constexpr char kToken[] = "multihost-token";

class ZerodMultiHost : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(hosts_.ok()) << "the hosts did not come up (they need root and openssh-server): " << hosts_.error();
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  void TearDown() override {
    zerod_.reset();
    TempDirTest::TearDown();
  }

  // zerod on the first host, launching `worker` with the hosts' mpirun
  // settings and this environment, which it exports to the ranks on the
  // other hosts (mpirun gives them no other).
  void start_zerod(const std::string& worker, std::vector<std::string> env, std::vector<std::string> options = {}) {
    options.insert(options.end(), {"--token-file", write("token", kToken), "--slots", "8", "--heartbeat-interval",
                                   "0.1", "--worker", worker});
    for (const auto& [name, value] : hosts_.mca()) options.insert(options.end(), {"--mca", name, value});
    env.push_back("OMP_NUM_THREADS=1");
    for (const std::string& e : env) options.insert(options.end(), {"--export", e.substr(0, e.find('='))});
    zerod_ = std::make_unique<testing::ZerodProcess>(path("state"), options, env, 0, ZEROD_DAEMON_BIN,
                                                     hosts_.address(1), hosts_.enter(1));
    ASSERT_TRUE(zerod_->running()) << zerod_->error();
    client_ = std::make_unique<testing::CoordinatorClient>(zerod_->address(), kToken);
  }
  v1::SubmitJobRequest request(const nlohmann::json& config, int max_restarts) const {
    v1::SubmitJobRequest r;
    r.set_config_json(config.dump());
    r.set_world_size(4);
    r.mutable_placement()->add_hosts(hosts_.host(1) + ":2");
    r.mutable_placement()->add_hosts(hosts_.host(2) + ":2");
    r.mutable_restart()->set_max_restarts(max_restarts);
    r.mutable_restart()->set_hang_timeout_s(3600);
    return r;
  }
  std::string tag(const std::string& id, int attempt) const {
    return absl::StrCat(std::filesystem::canonical(path("state")).string(), "#", id, "#", attempt);
  }
  // The final loss of the same job as 4 ranks under mpirun on this host.
  double direct_loss(nlohmann::json config) {
    config["run"].erase("checkpoint");
    const testing::CommandResult r =
        testing::mpirun(4, "--config " + write("direct.json", config.dump()) + " --log-format json");
    EXPECT_EQ(r.code, 0) << r.out;
    const auto summary = testing::of_kind(testing::events(r.out), "summary");
    EXPECT_EQ(summary.size(), 1u) << r.out;
    return summary.empty() ? 0 : summary[0]["final_loss"].get<double>();
  }

  // Waits a while for host i to have nothing running but its sshd and
  // zerod; what is still there then.
  std::string left_on(int i) const {
    for (int tries = 0; tries < 600 && !hosts_.processes(i, zerod_->pids()).empty(); ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return hosts_.processes(i, zerod_->pids());
  }
  // Submits `r` and waits for its first attempt to pass `step`.
  std::string submit_and_reach(const v1::SubmitJobRequest& r, int64_t step) {
    std::string id;
    EXPECT_TRUE(client_->submit(r, &id).ok());
    v1::Job job;
    do {
      if (!client_->get(id, &job).ok() || is_terminal(job.state())) {
        ADD_FAILURE() << job.DebugString();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (job.progress().step() < step);
    return id;
  }

  // Job `id` succeeded in its second attempt, its first failed by rank 3
  // on the second host being killed (by the OOM killer, or SIGKILL): zerod
  // names it, rank 3's agent said so, and the other ranks, stopped by
  // mpirun, did not fail. Nothing of either attempt is left on any host
  // (mpirun's daemons there end as it does, a moment after), and the loss
  // is the uninterrupted run's, bit for bit.
  void expect_resumed_after_rank_3_was_killed(const std::string& id, const nlohmann::json& config, bool oom) {
    v1::Job job;
    ASSERT_TRUE(client_->watch(id, &job).ok());
    EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
    ASSERT_EQ(job.attempts_size(), 2);
    const std::string how = oom ? "the kernel's OOM killer" : "SIGKILL";
    const v1::Failure& f = job.first_failure();
    EXPECT_EQ(f.rank(), 3);
    EXPECT_EQ(f.signal(), SIGKILL);
    EXPECT_EQ(f.oom(), oom);
    EXPECT_EQ(f.host(), hosts_.host(2));
    EXPECT_EQ(f.reason(), absl::StrCat("rank 3 on ", hosts_.host(2), " was killed by ", how));
    for (int rank = 0; rank < 4; ++rank) {
      const std::string log =
          read_whole_file(path(absl::StrCat("state/jobs/", id, "/rank-", rank, ".log"))).value_or("");
      EXPECT_EQ(log.find("zero-agent: rank 3 was killed by " + how) != std::string::npos, rank == 3) << log;
      if (rank != 3) {
        EXPECT_EQ(log.find("was killed by"), std::string::npos) << log;
      }
    }
    EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());
    for (int i = 1; i <= 3; ++i) EXPECT_EQ(left_on(i), "") << hosts_.host(i);
    EXPECT_EQ(job.progress().loss(), direct_loss(config));
  }

  testing::NetnsHosts hosts_{3};
  std::unique_ptr<testing::ZerodProcess> zerod_;
  std::unique_ptr<testing::CoordinatorClient> client_;
};

nlohmann::json job(int steps, int checkpoint_interval) {
  nlohmann::json j = testing::tiny_job();
  j["run"]["steps"] = steps;
  if (checkpoint_interval > 0) j["run"]["checkpoint"] = {{"interval", checkpoint_interval}};
  j["steps_per_print"] = 5;
  j["zero_optimization"] = {{"stage", 3}};
  return j;
}

TEST_F(ZerodMultiHost, ARankKilledOnTheSecondHostRestartsTheJobFromItsCheckpoint) {
  // Rank 3 (the second host's second slot) of the first attempt stops after
  // step 12, still heartbeating, so that the kill lands after the
  // checkpoint of step 10.
  start_zerod(ZEROD_HANGING_WORKER_BIN, {"ZEROD_TEST_HANG=1:3:12"});
  const nlohmann::json config = job(24, 10);
  const std::string id = submit_and_reach(request(config, /*max_restarts=*/1), 12);
  pid_t victim = -1;
  while ((victim = testing::rank_pid(tag(id, 1), 3)) < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Every rank runs where the placement put it; from the first host, where
  // zerod runs, only that host's processes of the attempt can be seen.
  int on_first = 0;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(testing::NetnsHosts::host_of(testing::rank_pid(tag(id, 1), rank)), hosts_.host(rank / 2 + 1))
        << "rank " << rank;
  }
  for (pid_t p : tagged_processes(tag(id, 1))) on_first += testing::NetnsHosts::host_of(p) == hosts_.host(1);
  const testing::CommandResult seen = testing::run_command(
      absl::StrJoin(hosts_.enter(1), " ") + " sh -c 'grep -lsa " + tag(id, 1) + " /proc/[0-9]*/environ | wc -l'");
  EXPECT_EQ(seen.out, absl::StrCat(on_first, "\n"));
  EXPECT_GT(static_cast<int>(tagged_processes(tag(id, 1)).size()), on_first);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  expect_resumed_after_rank_3_was_killed(id, config, /*oom=*/false);
  // zerod learnt each rank's process, as its host numbers it.
  const std::string log = read_whole_file(path("state/zerod.log")).value_or("");
  EXPECT_NE(log.find(absl::StrCat("attempt 1 rank 3 on ", hosts_.host(2), ": pid ")), std::string::npos) << log;
}

// The second host's memory cgroup holds less than rank 3 takes after step
// 12: the kernel's OOM killer ends it there, its agent reads the kill from
// that host's cgroup, and zerod names the OOM kill and the host; the job
// resumes from its checkpoint to the uninterrupted run's loss.
TEST_F(ZerodMultiHost, AnOomKillOnTheSecondHostIsReadFromItsCgroupAndTheJobResumes) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  ASSERT_EQ(hosts_.limit_memory(2, kLimit), "");
  start_zerod(ZEROD_HANGING_WORKER_BIN, {absl::StrCat("ZEROD_TEST_HANG=1:3:12:", 3 * kLimit)});
  const nlohmann::json config = job(24, 10);
  const std::string id = submit_and_reach(request(config, /*max_restarts=*/1), 12);
  expect_resumed_after_rank_3_was_killed(id, config, /*oom=*/true);
}

// The second host's link is cut mid-run: its ranks go silent while the
// others' heartbeats go on, so after --host-timeout the attempt fails naming
// that host, and the job resumes from its checkpoint on the first and third
// hosts (whose slots still hold its 4 ranks) to the uninterrupted run's
// loss. zerod cannot reach the cut host: its ranks stop themselves when
// their lease (twice the host timeout) runs out, and mpirun's daemon there
// ends once the host is back and finds its mpirun gone; nothing of the
// failed attempt is left on any host.
TEST_F(ZerodMultiHost, AHostThatDisappearsFailsItsAttemptAndTheJobGoesOnWithoutIt) {
  start_zerod(ZEROD_WORKER_BIN, {}, {"--host-timeout", "3", "--grace", "2"});
  const nlohmann::json config = job(40, 10);
  v1::SubmitJobRequest r = request(config, /*max_restarts=*/1);
  r.mutable_placement()->add_hosts(hosts_.host(3) + ":2");
  const std::string id = submit_and_reach(r, 12);
  hosts_.cut(2);

  v1::Job job;
  ASSERT_TRUE(client_->watch(id, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.attempts_size(), 2);
  const v1::Failure& f = job.first_failure();
  EXPECT_EQ(f.host(), hosts_.host(2));
  EXPECT_EQ(f.reason().rfind("host " + hosts_.host(2) + " stopped answering: no heartbeat from its ranks (2, 3)", 0),
            0u)
      << f.reason();
  const std::string log = read_whole_file(path("state/zerod.log")).value_or("");
  EXPECT_NE(log.find(absl::StrCat("attempt 2 launched: 4 ranks on ", hosts_.host(1), ":2,", hosts_.host(3), ":2")),
            std::string::npos)
      << log;
  for (int tries = 0; tries < 600 && !tagged_processes(tag(id, 1)).empty(); ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());  // with the link still cut
  for (int rank : {2, 3}) {
    const std::string rank_log =
        read_whole_file(path(absl::StrCat("state/jobs/", id, "/rank-", rank, ".log"))).value_or("");
    EXPECT_NE(rank_log.find(absl::StrCat("no answer from zerod for 6 s (its lease); rank ", rank, " stops")),
              std::string::npos)
        << rank_log;
  }
  hosts_.mend(2);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(left_on(i), "") << hosts_.host(i);
  EXPECT_EQ(job.progress().loss(), direct_loss(config));  // bitwise, as if never interrupted
}

// zerod restarts while a job runs on three hosts: the new zerod finds the
// attempt by mpirun on its own host and takes it over, and asks every rank
// where it runs (the old zerod knew); a cancel then stops every process of
// it on every host, through mpirun and the ranks' agents.
TEST_F(ZerodMultiHost, ARestartedZerodTakesOverAJobOnThreeHostsAndACancelStopsItEverywhere) {
  start_zerod(ZEROD_WORKER_BIN, {});
  v1::SubmitJobRequest r = request(job(100000, 0), /*max_restarts=*/0);
  r.set_world_size(6);
  r.mutable_placement()->add_hosts(hosts_.host(3) + ":2");
  const std::string id = submit_and_reach(r, 3);
  zerod_->restart();
  ASSERT_TRUE(zerod_->running()) << zerod_->error();
  client_ = std::make_unique<testing::CoordinatorClient>(zerod_->address(), kToken);
  // Each rank tells the new zerod where it runs, as it told the first.
  const auto told = [&](int rank) {
    const std::string log = read_whole_file(path("state/zerod.log")).value_or("");
    const std::string placed = absl::StrCat("attempt 1 rank ", rank, " on ", hosts_.host(rank / 2 + 1), ": pid ");
    int n = 0;
    for (size_t at = log.find(placed); at != std::string::npos; at = log.find(placed, at + 1)) ++n;
    return n;
  };
  for (int rank = 0; rank < 6; ++rank) {
    for (int tries = 0; tries < 600 && told(rank) < 2; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(told(rank), 2) << "rank " << rank;
  }
  const std::string log = read_whole_file(path("state/zerod.log")).value_or("");
  EXPECT_NE(log.find("attempt 1 taken over: its processes are still running"), std::string::npos) << log;
  v1::Job job;
  ASSERT_TRUE(client_->get(id, &job).ok());
  EXPECT_EQ(job.state(), v1::RUNNING) << job.DebugString();

  ASSERT_TRUE(client_->cancel(id, &job).ok());
  ASSERT_TRUE(client_->watch(id, &job).ok());
  EXPECT_EQ(job.state(), v1::CANCELLED);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).state(), v1::CANCELLED);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(left_on(i), "") << hosts_.host(i);
  EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());
}

// Hosts that cannot take the job are refused before anything is recorded
// or launched, the host named: one that does not exist, more ranks than the
// hosts' slots, and a host whose link is cut.
TEST_F(ZerodMultiHost, HostsThatCannotTakeTheJobAreRefusedBeforeLaunch) {
  start_zerod(ZEROD_WORKER_BIN, {});
  const nlohmann::json config = job(4, 0);
  const std::string agent = hosts_.mca()[0].second;
  std::string id;
  v1::SubmitJobRequest r = request(config, 0);
  r.mutable_placement()->set_hosts(1, hosts_.host(9) + ":2");
  grpc::Status s = client_->submit(r, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), absl::StrCat("placement host '", hosts_.host(9), "' cannot be reached through '",
                                            agent, "': netns_rsh: no host '", hosts_.host(9),
                                            "' (netns_hosts.sh brought up no such host); nothing was submitted"));
  r = request(config, 0);
  r.set_world_size(5);
  s = client_->submit(r, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), absl::StrCat("the job asks for 5 ranks but its hosts give 4 slots (", hosts_.host(1),
                                            ":2, ", hosts_.host(2), ":2; a host without ':slots' runs one)"));
  hosts_.cut(2);
  s = client_->submit(request(config, 0), &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // ssh's own words: it cannot connect.
  const std::string refused = s.error_message();
  const std::string head = absl::StrCat("placement host '", hosts_.host(2), "' cannot be reached through '", agent,
                                        "': ssh: connect to host ", hosts_.address(2), " port 22: ");
  EXPECT_EQ(refused.substr(0, head.size()), head) << refused;
  EXPECT_TRUE(absl::EndsWith(refused, "; nothing was submitted")) << refused;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(client_->list(&jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(left_on(i), "") << hosts_.host(i);
}

}  // namespace
}  // namespace zerod
