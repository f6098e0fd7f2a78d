// A zerod daemon as a child process, and a client of it: for the end-to-end
// tests and the load benchmark. Needs ZEROD_DAEMON_BIN from the build.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "proto/zerod.grpc.pb.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/core/whole_file.h"
#include "tests/process_tree.h"

extern char** environ;

namespace zerod::testing {

class ZerodProcess {
 public:
  // Starts zerod (`binary`) on `state_dir` with these extra options and
  // environment entries ("NAME=value"), listening on `host`; port 0 picks
  // a free port. `enter`, when given, is a command that runs zerod as its
  // child and ends as zerod does (nsenter onto another host). Waits until
  // it serves or exits (see running(), error() and exit_status()).
  ZerodProcess(std::string state_dir, std::vector<std::string> options, std::vector<std::string> env = {}, int port = 0,
               std::string binary = ZEROD_DAEMON_BIN, std::string host = "127.0.0.1",
               std::vector<std::string> enter = {})
      : state_dir_(std::move(state_dir)),
        options_(std::move(options)),
        env_(std::move(env)),
        binary_(std::move(binary)),
        host_(std::move(host)),
        enter_(std::move(enter)) {
    start(port);
  }
  ~ZerodProcess() { stop(SIGTERM); }

  // Stops it with `sig` and waits for it; running jobs keep running.
  void stop(int sig) {
    if (pid_ <= 0) return;
    kill(zerod_pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Starts it again on the same state directory and port.
  void restart() {
    stop(SIGTERM);
    start(port_);
  }

  // Its processes: zerod, and what it runs under.
  std::vector<pid_t> pids() const { return {pid_, zerod_pid_}; }
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  bool running() const { return pid_ > 0; }
  // Why it is not running, when it failed to start, and its exit status then.
  const std::string& error() const { return error_; }
  int exit_status() const { return exit_status_; }

 private:
  void start(int port) {
    const std::string address_file = state_dir_ + "/zerod.address";
    std::filesystem::create_directories(state_dir_);
    std::filesystem::remove(address_file);
    std::vector<std::string> args = enter_;
    args.insert(args.end(), {binary_, "--state-dir", state_dir_, "--listen", absl::StrCat(host_, ":", port)});
    args.insert(args.end(), options_.begin(), options_.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    for (std::string& e : env_) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    const std::string log = state_dir_ + "/zerod.log";
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    const int rc = posix_spawnp(&pid_, argv[0], &files, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&files);
    if (rc != 0) {
      pid_ = -1;
      error_ = "cannot start " + binary_;
      return;
    }
    // It writes its address once it serves; a zerod that exits has failed.
    for (;;) {
      if (std::optional<std::string> a = read_whole_file(address_file); a && !a->empty()) {
        address_ = std::string(absl::StripAsciiWhitespace(*a));
        port_ = std::stoi(address_.substr(address_.rfind(':') + 1));
        zerod_pid_ = enter_.empty() ? pid_ : child_pid(pid_);
        if (zerod_pid_ <= 0) zerod_pid_ = pid_;  // never kill(-1, ...)
        return;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        error_ = "zerod exited: " + read_whole_file(log).value_or("");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const std::string state_dir_;
  const std::vector<std::string> options_;
  std::vector<std::string> env_;
  const std::string binary_;
  const std::string host_;
  const std::vector<std::string> enter_;
  pid_t pid_ = -1;        // what was started: zerod, or `enter`
  pid_t zerod_pid_ = -1;  // zerod
  int exit_status_ = -1;
  int port_ = 0;
  std::string address_;
  std::string error_;
};

// The pid of one rank's training process (not its agent) of an attempt,
// found by its tag, rank variable and its agent's mark.
inline pid_t rank_pid(const std::string& tag, int rank) {
  const std::string nul(1, '\0');
  for (pid_t p : tagged_processes(tag)) {
    std::optional<std::string> env = read_whole_file(absl::StrCat("/proc/", p, "/environ"));
    if (!env) continue;
    env->insert(env->begin(), '\0');
    if (env->find(absl::StrCat(nul, "OMPI_COMM_WORLD_RANK=", rank, nul)) != std::string::npos &&
        env->find(nul + "ZEROD_RANK_AGENT=") != std::string::npos) {
      return p;
    }
  }
  return -1;
}

// Calls carrying a token (none when empty).
class CoordinatorClient {
 public:
  CoordinatorClient(const std::string& address, std::string token, const std::string& ca_file = "")
      : token_(std::move(token)), stub_(v1::Coordinator::NewStub(*open_channel(address, ca_file))) {}

  std::unique_ptr<grpc::ClientContext> context() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token_.empty()) add_token(*ctx, token_);
    return ctx;
  }
  v1::Coordinator::Stub& stub() { return *stub_; }

  grpc::Status submit(const v1::SubmitJobRequest& req, std::string* id) {
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(context().get(), req, &resp);
    *id = resp.job_id();
    return s;
  }
  grpc::Status get(const std::string& id, v1::Job* job) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    return stub_->GetJob(context().get(), req, job);
  }
  grpc::Status list(v1::ListJobsResponse* resp) { return stub_->ListJobs(context().get(), {}, resp); }
  grpc::Status cancel(const std::string& id, v1::Job* job) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    return stub_->CancelJob(context().get(), req, job);
  }
  // Follows the job to its end; its last state.
  grpc::Status watch(const std::string& id, v1::Job* last) {
    auto ctx = context();
    v1::WatchJobRequest req;
    req.set_job_id(id);
    auto reader = stub_->WatchJob(ctx.get(), req);
    for (v1::Job j; reader->Read(&j);) *last = j;
    return reader->Finish();
  }
  // A rank's whole log (follow: until the job ends).
  grpc::Status logs(const std::string& id, int rank, bool follow, std::string* text) {
    auto ctx = context();
    v1::StreamLogsRequest req;
    req.set_job_id(id);
    req.set_rank(rank);
    req.set_follow(follow);
    auto reader = stub_->StreamLogs(ctx.get(), req);
    for (v1::LogChunk c; reader->Read(&c);) *text += c.data();
    return reader->Finish();
  }

 private:
  std::string token_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace zerod::testing
