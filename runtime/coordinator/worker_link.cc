#include "runtime/coordinator/worker_link.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/launcher.h"

namespace zerod {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

v1::WorkerId worker_id(int rank) {
  v1::WorkerId id;
  id.set_job_id(env_or("ZEROD_JOB_ID"));
  int attempt = 0;
  (void)absl::SimpleAtoi(env_or("ZEROD_ATTEMPT"), &attempt);
  id.set_attempt(attempt);
  id.set_rank(rank);
  return id;
}

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

void leave_exit_record(const std::string& dir, const v1::ReportExitRequest& req) {
  const std::string path = exit_record_path(dir, req.worker().rank());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    req.SerializeToOstream(&out);
    out.close();
    if (!out) {
      fprintf(stderr, "cannot write the exit record %s\n", tmp.c_str());
      return;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) fprintf(stderr, "cannot write the exit record %s\n", path.c_str());
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

absl::StatusOr<ZerodConnection> connect_to_zerod(const std::string& address) {
  ZEROD_ASSIGN_OR_RETURN(std::string token, load_token(env_or("ZEROD_TOKEN_FILE")));
  auto channel = open_channel(address, env_or("ZEROD_TLS_CA"));
  if (!channel.ok()) {
    return absl::Status(channel.status().code(),
                        absl::StrCat("reaching zerod at ", address, ": ", channel.status().message()));
  }
  return ZerodConnection{v1::WorkerControl::NewStub(*channel), std::move(token)};
}

}  // namespace zerod
