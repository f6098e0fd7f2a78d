// Launching and stopping an attempt's processes, and reading why it failed.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/zerod.pb.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/core/whole_file.h"
#include "tests/temp_dir.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

using ::zerod::testing::TempDirTest;

TEST(Launcher, ArgumentsAreAnArrayWithTheJobsSettings) {
  LaunchSpec s;
  s.mpirun = "/usr/bin/mpirun";
  s.worker = "/opt/zero-worker";
  s.agent = "/opt/zero-agent";
  s.world_size = 3;
  s.job_dir = "/state/jobs/7";
  s.config = "/state/jobs/7/job.json";
  s.overrides = {"run.resume=\"latest\""};
  s.env = {{"ZEROD_JOB_ID", "7"}, {"NAME", "a value; with $(shell) text"}};
  s.hosts = {"a:2", "b"};
  s.mca = {{"plm_rsh_agent", "/opt/agent --with args"}, {"btl_tcp_if_include", "10.0.0.0/24"}};
  s.exports = {"OMP_NUM_THREADS"};
  const std::vector<std::string> argv = mpirun_argv(s);
  const auto has = [&](const std::vector<std::string>& seq) {
    return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
  };
  EXPECT_EQ(argv.front(), "/usr/bin/mpirun");
  EXPECT_TRUE(has({"-np", "3"}));
  EXPECT_TRUE(has({"--wdir", "/state/jobs/7"}));
  EXPECT_TRUE(has({"--oversubscribe"}));
  EXPECT_TRUE(has({"--host", "a:2,b"}));
  EXPECT_TRUE(has({"--mca", "plm_rsh_agent", "/opt/agent --with args"}));
  EXPECT_TRUE(has({"--mca", "btl_tcp_if_include", "10.0.0.0/24"}));
  EXPECT_TRUE(has({"-x", "OMP_NUM_THREADS"}));
  EXPECT_TRUE(has({"-x", kWorkerTagEnv}));
  EXPECT_TRUE(has({"-x", "ZEROD_JOB_ID=7"}));
  EXPECT_TRUE(has({"-x", "NAME=a value; with $(shell) text"}));  // one argument, never parsed by a shell
  EXPECT_TRUE(has({"/opt/zero-agent", "/opt/zero-worker", "--config", "/state/jobs/7/job.json", "--set",
                   "run.resume=\"latest\""}));
  EXPECT_EQ(argv.back(), "run.resume=\"latest\"");
}

// mpirun's own words (Open MPI 4.1) for the ways a rank fails.
TEST(Launcher, ReadsTheFailedRankFromMpirunsOutput) {
  auto killed = parse_launcher_failure(
      "--------------------------------------------------------------------------\n"
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n"
      "--------------------------------------------------------------------------\n");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->rank, 1);
  EXPECT_EQ(killed->signal, 9);
  EXPECT_EQ(killed->exit_code, 0);
  auto exited = parse_launcher_failure(
      "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
      "the job to be terminated. The first process to do so was:\n\n"
      "  Process name: [[8410,1],3]\n"
      "  Exit code:    2\n");
  ASSERT_TRUE(exited);
  EXPECT_EQ(exited->rank, 3);
  EXPECT_EQ(exited->exit_code, 2);
  EXPECT_EQ(exited->signal, 0);
  auto aborted = parse_launcher_failure(
      "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\n"
      "with errorcode 1.\n");
  ASSERT_TRUE(aborted);
  EXPECT_EQ(aborted->rank, 0);
  EXPECT_EQ(aborted->exit_code, 1);
  EXPECT_FALSE(parse_launcher_failure("all went well\n"));
}

TEST(Launcher, ReadsOomKillsFromMemoryEvents) {
  EXPECT_EQ(parse_oom_kills("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"), 2);
  EXPECT_FALSE(parse_oom_kills("low 0\nhigh 0\n"));
  // cgroup v1's memory.oom_control.
  EXPECT_EQ(parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 3);
}

TEST(Launcher, FindsTheMemoryCgroupsFilesOfV1AndV2) {
  // A hybrid machine: v1's memory hierarchy counts, v2's is the fallback.
  EXPECT_EQ(oom_kill_files("12:pids:/a\n4:memory:/process_api/x\n1:cpu,cpuacct:/b\n0::/c\n"),
            (std::vector<std::string>{"/sys/fs/cgroup/memory/process_api/x/memory.oom_control",
                                      "/sys/fs/cgroup/memory/memory.oom_control",
                                      "/sys/fs/cgroup/c/memory.events", "/sys/fs/cgroup/memory.events"}));
  EXPECT_EQ(oom_kill_files("0::/user.slice/job.scope\n"),
            (std::vector<std::string>{"/sys/fs/cgroup/user.slice/job.scope/memory.events",
                                      "/sys/fs/cgroup/memory.events"}));
  // At the root, its own file once.
  EXPECT_EQ(oom_kill_files("0::/\n"), (std::vector<std::string>{"/sys/fs/cgroup/memory.events"}));
  EXPECT_TRUE(oom_kill_files("").empty());
  EXPECT_TRUE(oom_kill_files("garbage\n").empty());
}

class LauncherFiles : public TempDirTest {};

// Placement hosts asked through the agent mpirun would use: one that
// answers, this machine (not asked), one the agent cannot reach (its words
// in the refusal), one that never answers (given up at the timeout).
TEST_F(LauncherFiles, HostsAreAskedThroughTheAgentBeforeLaunch) {
  const std::string agent = write("agent.sh",
                                  "#!/bin/sh\n"
                                  "[ \"$2\" = true ] || exit 3\n"
                                  "case $1 in\n"
                                  "  up*) exit 0 ;;\n"
                                  "  slow) sleep 60 ;;\n"
                                  "  *) echo \"agent: connecting\" >&2; echo \"agent: no route to $1\" >&2; exit 255 ;;\n"
                                  "esac\n");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  const std::vector<std::pair<std::string, std::string>> mca = {{"btl_tcp_if_include", "lo"},
                                                                {"plm_rsh_agent", agent}};
  EXPECT_TRUE(check_hosts_reachable({"up1:2", "localhost", "up2"}, mca, 30).ok());
  EXPECT_TRUE(check_hosts_reachable({}, mca, 30).ok());
  const absl::Status down = check_hosts_reachable({"up1", "node7:4"}, mca, 30);
  EXPECT_EQ(down.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(down.message(), "placement host 'node7' cannot be reached through '" + agent + "': agent: no route to node7");
  const absl::Status slow = check_hosts_reachable({"up1", "slow"}, mca, 0.3);
  EXPECT_EQ(slow.message(), "placement host 'slow' did not answer '" + agent + "' within 0.3 s");
  const absl::Status missing = check_hosts_reachable({"node7"}, {{"plm_rsh_agent", path("no-such-agent")}}, 30);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("no-such-agent"), std::string::npos) << missing.message();
}

TEST_F(LauncherFiles, LastLinesOfALog) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "line " + std::to_string(i) + "\n";
  const std::string p = write("rank-0.log", text);
  EXPECT_EQ(last_lines(p, 3), (std::vector<std::string>{"line 47", "line 48", "line 49"}));
  // Reading only the tail: the cut first line is dropped.
  EXPECT_EQ(last_lines(p, 100, 20), (std::vector<std::string>{"line 48", "line 49"}));
  EXPECT_TRUE(last_lines(path("absent.log"), 5).empty());
}

// Starts `sleep` with the tag in its environment, in a process group of its own.
pid_t start_tagged(const std::string& tag) {
  const std::string env = std::string(kWorkerTagEnv) + "=" + tag;
  char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("60"), nullptr};
  char* envp[] = {const_cast<char*>(env.c_str()), nullptr};
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawnp(&pid, "sleep", nullptr, &attr, argv, envp), 0);
  posix_spawnattr_destroy(&attr);
  return pid;
}

TEST(Launcher, FindsAndStopsEveryTaggedProcess) {
  const std::string tag = "test#" + std::to_string(getpid()) + "#1";
  const pid_t a = start_tagged(tag), b = start_tagged(tag);
  const pid_t other = start_tagged(tag + "0");  // a tag that only begins the same
  for (int i = 0; i < 100 && tagged_processes(tag).size() < 2; ++i) usleep(10000);
  std::vector<pid_t> found = tagged_processes(tag);
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, (std::vector<pid_t>{std::min(a, b), std::max(a, b)}));
  EXPECT_EQ(signal_attempt(-1, tag, SIGTERM), 2);
  for (pid_t p : {a, b}) {
    int status = 0;
    ASSERT_EQ(waitpid(p, &status, 0), p);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  }
  EXPECT_TRUE(tagged_processes(tag).empty());
  EXPECT_EQ(tagged_processes(tag + "0"), std::vector<pid_t>{other});
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
}

}  // namespace
}  // namespace zerod

namespace zerod {
namespace {

// zero-agent (runtime/coordinator/rank_agent.h) by itself: what it
// refuses, what it passes through, and a training killed under it.
class RankAgent : public testing::TempDirTest {
 protected:
  // The agent as rank 0 of job 7 with `args`, zerod nowhere (no token:
  // nothing is sent), its log in this directory; its output and how it
  // ended ("status=N", -N when killed by signal N).
  testing::CommandResult agent(const std::string& args, const std::string& env = "") {
    const std::string status = "import subprocess, sys; print('status=%d' % subprocess.run(sys.argv[1:]).returncode)";
    return testing::run_command(absl::StrCat("cd ", path(""), " && env -u OMPI_COMM_WORLD_RANK ", env,
                                             " ZEROD_JOB_ID=7 ZEROD_ATTEMPT=1 ZEROD_LOG_DIR=", path(""),
                                             " python3 -c \"", status, "\" ", ZEROD_AGENT_BIN, " ", args, " 2>&1"));
  }
  std::string log() { return read_whole_file(path("rank-0.log")).value_or(""); }
};

TEST_F(RankAgent, RunsOnlyUnderZerodAndWithAProgram) {
  for (const std::string& env : {std::string("-u ZEROD_COORDINATOR"), std::string("ZEROD_COORDINATOR=127.0.0.1:1")}) {
    const testing::CommandResult r = agent(env[0] == '-' ? "/bin/true" : "", env);
    EXPECT_NE(r.out.find("zero-agent: runs a rank's training under zerod"), std::string::npos) << r.out;
    EXPECT_TRUE(absl::EndsWith(r.out, "status=2\n")) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(path("rank-0.log")));  // nothing was started or written
}

TEST_F(RankAgent, NamesAProgramItCannotStart) {
  const testing::CommandResult r = agent("/nonexistent/zero-worker --config x", "ZEROD_COORDINATOR=127.0.0.1:1");
  EXPECT_TRUE(absl::EndsWith(r.out, "status=127\n")) << r.out;
  EXPECT_EQ(log(), "zero-agent: rank 0: cannot start /nonexistent/zero-worker: No such file or directory\n");
  EXPECT_FALSE(std::filesystem::exists(path("rank-0.exit")));
}

TEST_F(RankAgent, PassesAnExitOnAndReportsAKillAsItsOwnDeath) {
  // The training sees its agent's mark; its status comes back as it was.
  const testing::CommandResult exited =
      agent("sh -c 'test \"$ZEROD_RANK_AGENT\" -gt 1 && echo trained && exit 3'", "ZEROD_COORDINATOR=127.0.0.1:1");
  EXPECT_TRUE(absl::EndsWith(exited.out, "status=3\n")) << exited.out;
  EXPECT_EQ(log(), "trained\n");
  EXPECT_FALSE(std::filesystem::exists(path("rank-0.exit")));  // the training's to leave
  // Killed by what the agent did not send: it says so, leaves the record,
  // and dies of the same signal.
  const testing::CommandResult killed = agent("sh -c 'kill -9 $$'", "ZEROD_COORDINATOR=127.0.0.1:1");
  EXPECT_TRUE(absl::EndsWith(killed.out, "status=-9\n")) << killed.out;
  EXPECT_EQ(log(), "trained\nzero-agent: rank 0 was killed by SIGKILL\n");
  v1::ReportExitRequest record;
  ASSERT_TRUE(record.ParseFromString(read_whole_file(path("rank-0.exit")).value_or("")));
  EXPECT_EQ(record.worker().job_id(), "7");
  EXPECT_EQ(record.worker().attempt(), 1);
  EXPECT_EQ(record.worker().rank(), 0);
  EXPECT_EQ(record.signal(), SIGKILL);
  EXPECT_EQ(record.exit_code(), 128 + SIGKILL);
  EXPECT_FALSE(record.oom());  // no OOM kill was counted
}

}  // namespace
}  // namespace zerod
