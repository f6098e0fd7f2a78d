#include "runtime/coordinator/worker_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/rank_env.h"
#include "proto/zerod.grpc.pb.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/core/memory.h"
#include "runtime/engine/worker.h"

namespace zerod {
namespace {

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

class Agent final : public RunObserver {
 public:
  Agent(std::unique_ptr<v1::WorkerControl::Stub> stub, std::string token, v1::WorkerId id, std::string log_dir,
        AfterStep after_step)
      : stub_(std::move(stub)),
        token_(std::move(token)),
        id_(std::move(id)),
        log_dir_(std::move(log_dir)),
        after_step_(std::move(after_step)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Agent() override {
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
    v1::ReportExitResponse resp;
    grpc::ClientContext ctx;
    add_token(ctx, token_);
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(until);
    (void)stub_->ReportExit(&ctx, req, &resp);
  }

 private:
  // Registers, then heartbeats until the run is over; zerod being away (a
  // restart) only means trying again at the next beat.
  void loop() {
    auto interval = std::chrono::milliseconds(1000);
    bool registered = false;
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      lock.unlock();
      if (!registered) {
        v1::RegisterWorkerRequest req;
        *req.mutable_worker() = id_;
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        req.set_host(host);
        req.set_pid(getpid());
        v1::RegisterWorkerResponse resp;
        grpc::ClientContext ctx;
        add_token(ctx, token_);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        if (stub_->RegisterWorker(&ctx, req, &resp).ok()) {
          registered = true;
          interval = std::chrono::milliseconds(std::max<int64_t>(10, resp.heartbeat_interval_ms()));
        }
      } else if (heartbeat()) {
        fprintf(stderr, "zerod: the attempt is over; rank %d stops\n", id_.rank());
        kill(getpid(), SIGTERM);
      }
      lock.lock();
      wake_.wait_for(lock, interval, [this] { return quit_; });
    }
  }

  // One beat; true when zerod says stop. With `until`, it waits till then
  // for zerod to be reachable.
  bool heartbeat(std::optional<std::chrono::system_clock::time_point> until = std::nullopt) {
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
    return stub_->Heartbeat(&ctx, req, &resp).ok() && resp.stop();
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
  if (absl::Status s = redirect_output(log_dir, rank->rank); !s.ok()) {
    err << "zero-worker: " << s.message() << "\n";
    return exit_code_for(s);
  }
  auto token = load_token(env_or("ZEROD_TOKEN_FILE"));
  auto channel = token.ok() ? open_channel(address, env_or("ZEROD_TLS_CA")) : token.status();
  if (!channel.ok()) {
    err << "zero-worker: reaching zerod at " << address << ": " << channel.status().message() << "\n";
    return exit_code_for(channel.status());
  }
  v1::WorkerId id;
  id.set_job_id(env_or("ZEROD_JOB_ID"));
  int attempt = 0;
  (void)absl::SimpleAtoi(env_or("ZEROD_ATTEMPT"), &attempt);
  id.set_attempt(attempt);
  id.set_rank(rank->rank);
  Agent agent(v1::WorkerControl::NewStub(*channel), *token, id, log_dir, std::move(after_step));
  const int code = run_worker(argc, argv, out, err, &agent);
  out.flush();
  err.flush();
  agent.report_exit(code);
  return code;
}

}  // namespace zerod
