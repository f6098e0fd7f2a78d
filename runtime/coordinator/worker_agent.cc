#include "runtime/coordinator/worker_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
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

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/rank_env.h"
#include "proto/zerod.grpc.pb.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/core/memory.h"
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

// The training stops itself through its agent, as mpirun would stop it:
// the agent passes SIGTERM on, and knows it was no failure.
void stop_rank() { kill(getppid(), SIGTERM); }

class Reporter final : public RunObserver {
 public:
  Reporter(std::unique_ptr<v1::WorkerControl::Stub> stub, std::string token, v1::WorkerId id, std::string log_dir,
        AfterStep after_step)
      : stub_(std::move(stub)),
        token_(std::move(token)),
        id_(std::move(id)),
        log_dir_(std::move(log_dir)),
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
  // restart) only means trying again at the next beat, up to the lease it
  // gave: past that, zerod has given this rank's host up, and the rank stops.
  void loop() {
    using Clock = std::chrono::steady_clock;
    auto interval = std::chrono::milliseconds(1000);
    std::optional<std::chrono::milliseconds> lease;  // known once registered
    Clock::time_point answered = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      lock.unlock();
      if (!lease) {
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
        if (stub_->RegisterWorker(&ctx, req, &resp).ok()) {
          lease = std::chrono::milliseconds(resp.lease_ms());
          answered = Clock::now();
          interval = std::chrono::milliseconds(std::max<int64_t>(10, resp.heartbeat_interval_ms()));
        }
      } else if (std::optional<bool> stop = heartbeat()) {
        answered = Clock::now();
        if (*stop) {
          fprintf(stderr, "zerod: the attempt is over; rank %d stops\n", id_.rank());
          stop_rank();
        }
      } else if (lease->count() > 0 && Clock::now() - answered > *lease) {
        fprintf(stderr, "zerod: no answer from zerod for %.3g s (its lease); rank %d stops\n",
                std::chrono::duration<double>(*lease).count(), id_.rank());
        stop_rank();
      }
      lock.lock();
      wake_.wait_for(lock, interval, [this] { return quit_; });
    }
  }

  // One beat: whether zerod says stop; none when it did not answer. With
  // `until`, it waits till then for zerod to be reachable.
  std::optional<bool> heartbeat(std::optional<std::chrono::system_clock::time_point> until = std::nullopt) {
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
    return resp.stop();
  }

  std::unique_ptr<v1::WorkerControl::Stub> stub_;
  const std::string token_;
  const v1::WorkerId id_;
  const std::string log_dir_;
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

void forward(int sig) {
  g_forwarded = sig;
  if (g_training > 0) kill(g_training, sig);
}

// What mpirun and its daemons send a rank, passed on to its training.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};

// The rank's agent: the process mpirun started for the rank. It runs the
// training as a child (this program again, with kAgentEnv set) and outlives
// it, so that when the kernel kills the training, its own host says how:
// the signal, and whether the OOM killer counted a kill in the cgroup they
// share. It reports that to zerod, then ends by the same signal, for mpirun
// to see the rank die as it did.
int run_rank_agent(char** argv, const v1::WorkerId& id, const std::string& address, const std::string& log_dir,
                   std::ostream& err) {
  const std::optional<int64_t> oom_base = oom_kills();
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    err << "zero-worker: cannot find its own program (/proc/self/exe): " << std::strerror(errno) << "\n";
    return 1;
  }
  self[n] = '\0';
  const std::string marker = absl::StrCat(kAgentEnv, "=", getpid());
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
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
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &held);
  posix_spawnattr_setsigdefault(&attr, &forwarded);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t child = -1;
  const int rc = posix_spawn(&child, self, nullptr, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    err << "zero-worker: cannot start rank " << id.rank() << "'s training: " << std::strerror(rc) << "\n";
    return 1;
  }
  g_training = child;
  sigprocmask(SIG_SETMASK, &held, nullptr);

  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  g_training = 0;  // its pid may be another's now
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
    return run_rank_agent(argv, id, address, log_dir, err);
  }
  // The training, whose output goes where its agent's does. It ends with
  // its agent (which it cannot outlive unseen).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (absl::StrCat(getppid()) != agent) return 1;  // the agent ended before prctl
  absl::StatusOr<Connection> zerod = connect_to_zerod(address);
  if (!zerod.ok()) {
    err << "zero-worker: " << zerod.status().message() << "\n";
    return exit_code_for(zerod.status());
  }
  Reporter reporter(std::move(zerod->stub), zerod->token, id, log_dir, std::move(after_step));
  const int code = run_worker(argc, argv, out, err, &reporter);
  out.flush();
  err.flush();
  reporter.report_exit(code);
  return code;
}

}  // namespace zerod
