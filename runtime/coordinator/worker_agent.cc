#include "runtime/coordinator/worker_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/rank_env.h"
#include "proto/zerod.grpc.pb.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/core/memory.h"
#include "runtime/core/own_program.h"
#include "runtime/core/status.h"
#include "runtime/engine/worker.h"

extern char** environ;

namespace zerod {
namespace {

// Set in a rank's training process: the pid of its agent, the process
// mpirun started for the rank.
constexpr char kAgentEnv[] = "ZEROD_RANK_AGENT";
// How long an agent waits for zerod to take the report of a killed rank
// (its exit record holds it too).
constexpr std::chrono::seconds kAgentReportWait(5);

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// stdout and stderr into the job's log of this rank, appended across
// attempts, line by line so that `zeroctl logs --follow` sees each line.
absl::Status redirect_output(const std::string& dir, int rank) {
  const std::string path = rank_log_path(dir, rank);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  fflush(stdout);
  fflush(stderr);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return absl::OkStatus();
}

constexpr std::chrono::seconds kExitReportWait(60);

// The exit report, left in the job's directory too (whole or not at all):
// a zerod that was away when the rank ended reads it there.
void leave_exit_record(const std::string& dir, const v1::ReportExitRequest& req) {
  const std::string path = exit_record_path(dir, req.worker().rank());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    req.SerializeToOstream(&out);
    out.close();
    if (!out) {
      fprintf(stderr, "zero-worker: cannot write %s\n", tmp.c_str());
      return;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) fprintf(stderr, "zero-worker: cannot write %s\n", path.c_str());
}

void deliver_exit(v1::WorkerControl::Stub& stub, const std::string& token, const v1::ReportExitRequest& req,
                  std::chrono::system_clock::time_point until) {
  v1::ReportExitResponse resp;
  grpc::ClientContext ctx;
  add_token(ctx, token);
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(until);
  (void)stub.ReportExit(&ctx, req, &resp);
}

struct Connection {
  std::unique_ptr<v1::WorkerControl::Stub> stub;
  std::string token;
};

// zerod at ZEROD_COORDINATOR, with the token of ZEROD_TOKEN_FILE.
absl::StatusOr<Connection> connect_to_zerod(const std::string& address) {
  ZEROD_ASSIGN_OR_RETURN(std::string token, load_token(env_or("ZEROD_TOKEN_FILE")));
  auto channel = open_channel(address, env_or("ZEROD_TLS_CA"));
  if (!channel.ok()) {
    return absl::Status(channel.status().code(),
                        absl::StrCat("reaching zerod at ", address, ": ", channel.status().message()));
  }
  return Connection{v1::WorkerControl::NewStub(*channel), std::move(token)};
}

class Reporter final : public RunObserver {
 public:
  // `stopper`: the process that SIGTERM goes to when the rank must stop:
  // its agent, which passes it on and knows it was no failure (or itself
  // when it has none).
  Reporter(std::unique_ptr<v1::WorkerControl::Stub> stub, std::string token, v1::WorkerId id, std::string log_dir,
           pid_t stopper, std::optional<std::chrono::milliseconds> lease, AfterStep after_step)
      : stub_(std::move(stub)),
        token_(std::move(token)),
        id_(std::move(id)),
        log_dir_(std::move(log_dir)),
        stopper_(stopper),
        lease_(lease),
        after_step_(std::move(after_step)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Reporter() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void stepped(const StepResult& step, int64_t total_steps, double tokens_per_s) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      progress_.set_step(step.step);
      progress_.set_total_steps(total_steps);
      progress_.set_loss(step.loss);
      progress_.set_tokens_per_s(tokens_per_s);
    }
    if (after_step_) after_step_(id_.attempt(), id_.rank(), step.step);
  }

  void failing(int exit_code) override { report_exit(exit_code); }

  // The last progress, then the exit status, once. While zerod is away (a
  // restart) the worker waits a while to deliver them, so the zerod that
  // takes over learns how the attempt ended; past that wait, it finds them
  // in the exit record.
  void report_exit(int code) {
    if (reported_) return;
    reported_ = true;
    v1::ReportExitRequest req;
    *req.mutable_worker() = id_;
    req.set_exit_code(code);
    {
      std::lock_guard<std::mutex> lock(mu_);
      *req.mutable_progress() = progress_;
    }
    leave_exit_record(log_dir_, req);
    // One wait for both calls: the whole report takes at most kExitReportWait.
    const auto until = std::chrono::system_clock::now() + kExitReportWait;
    heartbeat(until);
    deliver_exit(*stub_, token_, req, until);
  }

 private:
  // Registers, then heartbeats until the run is over; zerod being away (a
  // restart) only means trying again at the next beat, within the lease:
  // past it, zerod has given this rank's host up, and the rank stops.
  void loop() {
    using Clock = std::chrono::steady_clock;
    auto interval = std::chrono::milliseconds(1000);
    bool registered = false;
    Clock::time_point answered = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      lock.unlock();
      if (!registered) {
        if (std::optional<int64_t> ms = register_rank()) {
          registered = true;
          answered = Clock::now();
          interval = std::chrono::milliseconds(std::max<int64_t>(10, *ms));
        }
      } else if (std::optional<v1::HeartbeatResponse> beat = heartbeat()) {
        answered = Clock::now();
        registered = !beat->register_again();
        if (beat->stop()) {
          fprintf(stderr, "zerod: the attempt is over; rank %d stops\n", id_.rank());
          kill(stopper_, SIGTERM);
        }
      }
      if (lease_ && Clock::now() - answered > *lease_) {
        fprintf(stderr, "zerod: no answer from zerod for %.3g s (its lease); rank %d stops\n",
                std::chrono::duration<double>(*lease_).count(), id_.rank());
        kill(stopper_, SIGTERM);
      }
      lock.lock();
      wake_.wait_for(lock, interval, [this] { return quit_; });
    }
  }

  // Tells zerod where this rank runs; the heartbeat interval (ms) it asks
  // for, none when it did not answer.
  std::optional<int64_t> register_rank() {
    v1::RegisterWorkerRequest req;
    *req.mutable_worker() = id_;
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    req.set_host(host);
    req.set_pid(getpid());
    req.set_pgid(getpgrp());
    v1::RegisterWorkerResponse resp;
    grpc::ClientContext ctx;
    add_token(ctx, token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!stub_->RegisterWorker(&ctx, req, &resp).ok()) return std::nullopt;
    return resp.heartbeat_interval_ms();
  }

  // One beat: zerod's answer, none when it did not answer. With `until`, it
  // waits till then for zerod to be reachable.
  std::optional<v1::HeartbeatResponse> heartbeat(
      std::optional<std::chrono::system_clock::time_point> until = std::nullopt) {
    v1::HeartbeatRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      *req.mutable_progress() = progress_;
    }
    *req.mutable_worker() = id_;
    const MemoryAccountant& acct = MemoryAccountant::global();
    req.set_host_memory_bytes(acct.current_total(Tier::kHost) + acct.current_total(Tier::kPinned));
    req.set_gpu_memory_bytes(acct.current_total(Tier::kGpu));
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    add_token(ctx, token_);
    ctx.set_wait_for_ready(until.has_value());
    ctx.set_deadline(until.value_or(std::chrono::system_clock::now() + std::chrono::seconds(5)));
    if (!stub_->Heartbeat(&ctx, req, &resp).ok()) return std::nullopt;
    return resp;
  }

  std::unique_ptr<v1::WorkerControl::Stub> stub_;
  const std::string token_;
  const v1::WorkerId id_;
  const std::string log_dir_;
  const pid_t stopper_;
  const std::optional<std::chrono::milliseconds> lease_;
  const AfterStep after_step_;
  bool reported_ = false;  // the exit status was sent
  std::mutex mu_;
  std::condition_variable wake_;
  bool quit_ = false;
  v1::Progress progress_;
  std::thread thread_;
};

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

// The lease zerod gives the ranks it launches (ZEROD_LEASE_S); none when
// it gives none.
std::optional<std::chrono::milliseconds> lease_from_env() {
  double s = 0;
  if (!absl::SimpleAtod(env_or("ZEROD_LEASE_S"), &s) || !(s > 0) || s > 1e9) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// The training, here or in the agent's child: registers, heartbeats,
// trains, reports.
int run_training(int argc, char** argv, std::ostream& out, std::ostream& err, const v1::WorkerId& id,
                 const std::string& address, const std::string& log_dir, pid_t stopper, AfterStep after_step) {
  absl::StatusOr<Connection> zerod = connect_to_zerod(address);
  if (!zerod.ok()) {
    err << "zero-worker: " << zerod.status().message() << "\n";
    return exit_code_for(zerod.status());
  }
  Reporter reporter(std::move(zerod->stub), zerod->token, id, log_dir, stopper, lease_from_env(),
                    std::move(after_step));
  const int code = run_worker(argc, argv, out, err, &reporter);
  out.flush();
  err.flush();
  reporter.report_exit(code);
  return code;
}

// Starts the training as a child running this program again (marked with
// kAgentEnv), with the forwarded signals at their defaults; -1 with the
// reason in `why` when it cannot.
pid_t spawn_training(char** argv, std::string& why) {
  const std::optional<std::string> self = own_program();
  if (!self) {
    why = "its own program cannot be found (/proc/self/exe)";
    return -1;
  }
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
  const int rc = posix_spawn(&child, self->c_str(), nullptr, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    why = absl::StrCat("cannot start ", *self, ": ", std::strerror(rc));
    child = -1;
    for (int sig : kForwarded) signal(sig, SIG_DFL);  // the training runs here
  }
  g_training = child;
  sigprocmask(SIG_SETMASK, &held, nullptr);
  return child;
}

// The rank's agent: the process mpirun started for the rank. It runs the
// training as a child and outlives it, so that when the kernel kills the
// training, its own host says how: the signal, and whether the OOM killer
// counted a kill in the cgroup they share. It reports that to zerod and in
// the exit record, then ends by the same signal, for mpirun to see the
// rank die as it did. Where it cannot start a child, the training runs in
// it, without an agent.
int run_rank_agent(int argc, char** argv, std::ostream& out, std::ostream& err, const v1::WorkerId& id,
                   const std::string& address, const std::string& log_dir, AfterStep after_step) {
  const std::optional<int64_t> oom_base = oom_kills();
  std::string why;
  const pid_t child = spawn_training(argv, why);
  if (child < 0) {
    err << "zero-worker: rank " << id.rank() << " trains without an agent: " << why << "\n";
    return run_training(argc, argv, out, err, id, address, log_dir, getpid(), std::move(after_step));
  }
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  g_training = 0;  // its pid may be another's now
  if (waited < 0) {
    err << "zero-worker: rank " << id.rank() << "'s agent lost its training: " << std::strerror(errno) << "\n";
    return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);  // the training reported it
  const int sig = WTERMSIG(status);
  // One ended by what mpirun sent the rank (stopping the job after another
  // rank's failure, or zerod's stop) did not fail: nothing to report.
  if (sig != g_forwarded) {
    const std::optional<int64_t> kills = oom_kills();
    const bool oom = sig == SIGKILL && oom_base && kills && *kills > *oom_base;
    fprintf(stderr, "zero-worker: rank %d was killed by %s\n", id.rank(),
            oom ? "the kernel's OOM killer" : signal_name(sig).c_str());
    v1::ReportExitRequest req;
    *req.mutable_worker() = id;
    req.set_exit_code(128 + sig);
    req.set_signal(sig);
    req.set_oom(oom);
    leave_exit_record(log_dir, req);
    if (absl::StatusOr<Connection> zerod = connect_to_zerod(address); zerod.ok()) {
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

}  // namespace

int run_supervised_worker(int argc, char** argv, std::ostream& out, std::ostream& err, AfterStep after_step) {
  const std::string address = env_or("ZEROD_COORDINATOR");
  if (address.empty()) return run_worker(argc, argv, out, err);
  auto rank = discover_rank();
  if (!rank.ok()) {
    err << "zero-worker: " << rank.status().message() << "\n";
    return exit_code_for(rank.status());
  }
  const std::string log_dir = env_or("ZEROD_LOG_DIR", ".");
  v1::WorkerId id;
  id.set_job_id(env_or("ZEROD_JOB_ID"));
  int attempt = 0;
  (void)absl::SimpleAtoi(env_or("ZEROD_ATTEMPT"), &attempt);
  id.set_attempt(attempt);
  id.set_rank(rank->rank);
  const std::string agent = env_or(kAgentEnv);
  if (agent.empty()) {
    if (absl::Status s = redirect_output(log_dir, rank->rank); !s.ok()) {
      err << "zero-worker: " << s.message() << "\n";
      return exit_code_for(s);
    }
    return run_rank_agent(argc, argv, out, err, id, address, log_dir, std::move(after_step));
  }
  // The agent's child: its output goes where the agent's does, a line at a
  // time, and it ends with its agent (which it cannot outlive unseen).
  setvbuf(stdout, nullptr, _IOLBF, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (absl::StrCat(getppid()) != agent) return 1;  // the agent ended before prctl
  return run_training(argc, argv, out, err, id, address, log_dir, getppid(), std::move(after_step));
}

}  // namespace zerod
