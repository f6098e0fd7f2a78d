// What a rank's processes, its agent (zero-agent) and its training
// (zero-worker), share to reach zerod: the rank's identity, its log, its
// exit record and report.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "proto/zerod.grpc.pb.h"
#include "runtime/core/status.h"

namespace zerod {

// Set in a rank's training process by its agent: the agent's pid.
inline constexpr char kAgentEnv[] = "ZEROD_RANK_AGENT";

// The variable's value, or `fallback` when it is not set.
std::string env_or(const char* name, const std::string& fallback = "");

// The rank `rank` of the attempt zerod launched (ZEROD_JOB_ID, ZEROD_ATTEMPT).
v1::WorkerId worker_id(int rank);

// stdout and stderr into the job's log of this rank (ZEROD_LOG_DIR's
// rank-N.log), appended across attempts, stdout a line at a time so that
// `zeroctl logs --follow` sees each line.
absl::Status redirect_output(const std::string& dir, int rank);

// The exit report, left in the job's directory too (whole or not at all):
// a zerod that was away when the rank ended reads it there.
void leave_exit_record(const std::string& dir, const v1::ReportExitRequest& req);

// Sends the report, waiting till `until` for zerod to be reachable.
void deliver_exit(v1::WorkerControl::Stub& stub, const std::string& token, const v1::ReportExitRequest& req,
                  std::chrono::system_clock::time_point until);

struct ZerodConnection {
  std::unique_ptr<v1::WorkerControl::Stub> stub;
  std::string token;
};
// zerod at `address`, with the token of ZEROD_TOKEN_FILE (and ZEROD_TLS_CA).
absl::StatusOr<ZerodConnection> connect_to_zerod(const std::string& address);

}  // namespace zerod
