#include "runtime/coordinator/worker_agent.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/rank_env.h"
#include "proto/zerod.grpc.pb.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/worker_link.h"
#include "runtime/core/memory.h"
#include "runtime/engine/worker.h"

namespace zerod {
namespace {

constexpr std::chrono::seconds kExitReportWait(60);

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

  void evaluated(const EvalResult& eval, const EvalRecord& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    progress_.set_eval_loss(eval.loss);
    progress_.set_eval_step(eval.step);
    progress_.set_best_eval_loss(record.best_loss);
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
    req.set_pinned_memory_bytes(acct.current_total(Tier::kPinned));
    req.set_nvme_bytes(acct.current_total(Tier::kNvme));
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
  absl::StatusOr<ZerodConnection> zerod = connect_to_zerod(address);
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
  const v1::WorkerId id = worker_id(rank->rank);
  const std::string agent = env_or(kAgentEnv);
  if (agent.empty()) {
    // Started without zero-agent: it keeps its own log and stops itself.
    if (absl::Status s = redirect_output(log_dir, rank->rank); !s.ok()) {
      err << "zero-worker: " << s.message() << "\n";
      return exit_code_for(s);
    }
    return run_training(argc, argv, out, err, id, address, log_dir, getpid(), std::move(after_step));
  }
  // Its output goes where its agent's does, a line at a time, and it ends
  // with its agent (which it cannot outlive unseen).
  setvbuf(stdout, nullptr, _IOLBF, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (absl::StrCat(getppid()) != agent) return 1;  // the agent ended before prctl
  return run_training(argc, argv, out, err, id, address, log_dir, getppid(), std::move(after_step));
}

}  // namespace zerod
