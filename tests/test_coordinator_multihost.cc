// zerod placing a job on two hosts of this machine (tests/netns_hosts.h),
// mpirun reaching them through the agent zerod is given with --mca: the
// ranks run on the hosts the job names and report them; a rank killed on
// the second host fails the attempt naming that host, and the job resumes
// from its checkpoint to the loss of the same job run straight through,
// with nothing of the failed attempt left on either host. Needs root.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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
    ASSERT_TRUE(hosts_.ok()) << "the hosts did not come up (network namespaces need root): " << hosts_.error();
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  void TearDown() override {
    zerod_.reset();
    TempDirTest::TearDown();
  }

  // zerod on the hosts' network, launching `worker` with the hosts' mpirun
  // settings and this environment, which it exports to the ranks on the
  // other hosts (mpirun gives them no other).
  void start_zerod(const std::string& worker, std::vector<std::string> env, std::vector<std::string> options = {}) {
    options.insert(options.end(), {"--token-file", write("token", kToken), "--slots", "8", "--heartbeat-interval",
                                   "0.1", "--worker", worker});
    for (const auto& [name, value] : hosts_.mca()) options.insert(options.end(), {"--mca", name, value});
    env.push_back("OMP_NUM_THREADS=1");
    for (const std::string& e : env) options.insert(options.end(), {"--export", e.substr(0, e.find('='))});
    zerod_ = std::make_unique<testing::ZerodProcess>(path("state"), options, env, 0, ZEROD_DAEMON_BIN,
                                                     hosts_.gateway());
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
  std::string id;
  ASSERT_TRUE(client_->submit(request(config, /*max_restarts=*/1), &id).ok());
  v1::Job job;
  pid_t victim = -1;
  while (victim < 0) {
    ASSERT_TRUE(client_->get(id, &job).ok());
    ASSERT_FALSE(is_terminal(job.state())) << job.DebugString();
    if (job.progress().step() >= 12) victim = testing::rank_pid(tag(id, 1), 3);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Every rank runs where the placement put it.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(testing::NetnsHosts::host_of(testing::rank_pid(tag(id, 1), rank)), hosts_.host(rank / 2 + 1))
        << "rank " << rank;
  }
  ASSERT_EQ(kill(victim, SIGKILL), 0);

  ASSERT_TRUE(client_->watch(id, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.attempts_size(), 2);
  const v1::Failure& f = job.first_failure();
  EXPECT_EQ(f.rank(), 3);
  EXPECT_EQ(f.signal(), SIGKILL);
  EXPECT_EQ(f.host(), hosts_.host(2));
  EXPECT_NE(f.reason().find("rank 3 on " + hosts_.host(2)), std::string::npos) << f.reason();
  // Nothing of either attempt is left, on any host (mpirun's daemons there
  // end as it does, a moment after).
  EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());
  for (int i = 1; i <= 2; ++i) {
    for (int tries = 0; tries < 300 && !hosts_.processes(i).empty(); ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(hosts_.processes(i), "") << hosts_.host(i);
  }
  EXPECT_EQ(job.progress().loss(), direct_loss(config));  // bitwise, as if never interrupted
}

// The second host's link is cut mid-run: its ranks go silent while the
// others' heartbeats go on, so after --host-timeout the attempt fails naming
// that host, and the job resumes from its checkpoint on the first and third
// hosts (whose slots still hold its 4 ranks) to the uninterrupted run's
// loss; nothing of the failed attempt is left on any host.
TEST_F(ZerodMultiHost, AHostThatDisappearsFailsItsAttemptAndTheJobGoesOnWithoutIt) {
  start_zerod(ZEROD_WORKER_BIN, {}, {"--host-timeout", "3", "--grace", "2"});
  const nlohmann::json config = job(40, 10);
  v1::SubmitJobRequest r = request(config, /*max_restarts=*/1);
  r.mutable_placement()->add_hosts(hosts_.host(3) + ":2");
  std::string id;
  ASSERT_TRUE(client_->submit(r, &id).ok());
  v1::Job job;
  do {
    ASSERT_TRUE(client_->get(id, &job).ok());
    ASSERT_FALSE(is_terminal(job.state())) << job.DebugString();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (job.progress().step() < 12);
  hosts_.cut(2);

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
  EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(hosts_.processes(i), "") << hosts_.host(i);
  EXPECT_EQ(job.progress().loss(), direct_loss(config));  // bitwise, as if never interrupted
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
                                            "' (no such network namespace); nothing was submitted"));
  r = request(config, 0);
  r.set_world_size(5);
  s = client_->submit(r, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), absl::StrCat("the job asks for 5 ranks but its hosts give 4 slots (", hosts_.host(1),
                                            ":2, ", hosts_.host(2), ":2; a host without ':slots' runs one)"));
  hosts_.cut(2);
  s = client_->submit(request(config, 0), &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), absl::StrCat("placement host '", hosts_.host(2), "' cannot be reached through '", agent,
                                            "': netns_rsh: host '", hosts_.host(2),
                                            "' is unreachable (its link is down); nothing was submitted"));
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(client_->list(&jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
  EXPECT_EQ(hosts_.processes(1), "");
}

}  // namespace
}  // namespace zerod
