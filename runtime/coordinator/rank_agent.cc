#include "runtime/coordinator/rank_agent.h"

#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/rank_env.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/coordinator/worker_link.h"

extern char** environ;

namespace zerod {
namespace {

// How long the agent waits for zerod to take the report of a killed rank
// (its exit record holds it too).
constexpr std::chrono::seconds kAgentReportWait(5);

volatile sig_atomic_t g_training = 0;   // the agent's child, for forward()
volatile sig_atomic_t g_forwarded = 0;  // the last signal passed on to it

// mpirun's daemons and zerod signal a rank's whole process group, so the
// training may get a signal twice: from them and from here.
void forward(int sig) {
  const int saved = errno;
  g_forwarded = sig;
  if (g_training > 0) kill(g_training, sig);
  errno = saved;
}

// What mpirun and its daemons send a rank, passed on to its training.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};

// Starts the training (argv[0] and on, found on PATH like a shell would)
// marked with kAgentEnv, with the forwarded signals at their defaults; -1
// with the reason in `why` when it cannot.
pid_t spawn_training(char** argv, std::string& why) {
  const std::string marker = absl::StrCat(kAgentEnv, "=", getpid());
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) {
    if (!absl::StartsWith(*e, absl::StrCat(kAgentEnv, "="))) envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(marker.c_str()));
  envp.push_back(nullptr);
  // Held until the child's pid is known, so that none is lost; the child
  // starts with none held and the default actions.
  sigset_t forwarded, held;
  sigemptyset(&forwarded);
  for (int sig : kForwarded) sigaddset(&forwarded, sig);
  sigprocmask(SIG_BLOCK, &forwarded, &held);
  struct sigaction sa = {};
  sa.sa_handler = forward;
  for (int sig : kForwarded) sigaction(sig, &sa, nullptr);
  signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would leave nothing to wait for
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &held);
  posix_spawnattr_setsigdefault(&attr, &forwarded);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t child = -1;
  const int rc = posix_spawnp(&child, argv[0], nullptr, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    why = absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc));
    child = -1;
  }
  g_training = child;
  sigprocmask(SIG_SETMASK, &held, nullptr);
  return child;
}

}  // namespace

int run_rank_agent(int argc, char** argv) {
  const std::string address = env_or("ZEROD_COORDINATOR");
  if (argc < 2 || address.empty()) {
    fprintf(stderr, "zero-agent: runs a rank's training under zerod, which launches it: "
                    "zero-agent PROGRAM [ARGS...] with ZEROD_COORDINATOR set\n");
    return 2;
  }
  absl::StatusOr<RankInfo> rank = discover_rank();
  if (!rank.ok()) {
    fprintf(stderr, "zero-agent: %s\n", std::string(rank.status().message()).c_str());
    return 2;
  }
  const std::string log_dir = env_or("ZEROD_LOG_DIR", ".");
  const v1::WorkerId id = worker_id(rank->rank);
  if (absl::Status s = redirect_output(log_dir, rank->rank); !s.ok()) {
    fprintf(stderr, "zero-agent: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const std::optional<int64_t> oom_base = oom_kills();
  std::string why;
  const pid_t child = spawn_training(argv + 1, why);
  if (child < 0) {
    fprintf(stderr, "zero-agent: rank %d: %s\n", id.rank(), why.c_str());
    return 127;
  }
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  g_training = 0;  // its pid may be another's now
  if (waited < 0) {
    fprintf(stderr, "zero-agent: rank %d lost its training: %s\n", id.rank(), std::strerror(errno));
    return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);  // the training reported it
  const int sig = WTERMSIG(status);
  // One ended by what mpirun sent the rank (stopping the job after another
  // rank's failure, or zerod's stop) did not fail: nothing to report.
  if (sig != g_forwarded) {
    const std::optional<int64_t> kills = oom_kills();
    const bool oom = sig == SIGKILL && oom_base && kills && *kills > *oom_base;
    fprintf(stderr, "zero-agent: rank %d was killed by %s\n", id.rank(),
            oom ? "the kernel's OOM killer" : signal_name(sig).c_str());
    v1::ReportExitRequest req;
    *req.mutable_worker() = id;
    req.set_exit_code(128 + sig);
    req.set_signal(sig);
    req.set_oom(oom);
    leave_exit_record(log_dir, req);
    if (absl::StatusOr<ZerodConnection> zerod = connect_to_zerod(address); zerod.ok()) {
      deliver_exit(*zerod->stub, zerod->token, req, std::chrono::system_clock::now() + kAgentReportWait);
    }
  }
  // The training's core, if it left one, is the one to keep.
  const rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  raise(sig);
  return 128 + sig;
}

}  // namespace zerod
