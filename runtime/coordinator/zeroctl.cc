#include "runtime/coordinator/zeroctl.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/zerod.grpc.pb.h"
#include "runtime/config/command_line.h"
#include "runtime/config/job_config.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/job_request.h"
#include "runtime/coordinator/job_store.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace {

std::string to_json(const google::protobuf::Message& m) {
  std::string s;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &s, o);
  return s;
}

// What zerod's refusal means for a script (gRPC's codes are absl's).
int exit_code(const grpc::Status& s) { return exit_code_for(static_cast<absl::StatusCode>(s.error_code())); }

std::string state_name(v1::JobState s) { return v1::JobState_Name(s); }

std::string clock_text(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
}

std::string when(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms), absl::LocalTimeZone());
}

std::string loss_text(const v1::Job& j) {
  return j.progress().step() > 0 ? absl::StrFormat("%.4f", j.progress().loss()) : std::string("-");
}

// One line a person reads at the end of a job.
std::string outcome_line(const v1::Job& j) {
  std::string line = absl::StrCat("job ", j.id(), " ", state_name(j.state()));
  if (j.progress().step() > 0) {
    absl::StrAppend(&line, ": step ", j.progress().step(), "/", j.progress().total_steps(), ", loss ",
                    absl::StrFormat("%.9g", j.progress().loss()));
  }
  absl::StrAppend(&line, ", ", j.attempts_size(), j.attempts_size() == 1 ? " attempt" : " attempts");
  if (j.has_first_failure() && !j.first_failure().reason().empty()) {
    absl::StrAppend(&line, "; first failure: ", j.first_failure().reason());
  }
  return line;
}

// Steps done and the time left, redrawn in place on a terminal; on anything
// else a line at each tenth of the run.
class ProgressBar {
 public:
  explicit ProgressBar(std::ostream& err) : err_(err), tty_(isatty(STDERR_FILENO)) {}
  void show(const v1::Job& j) {
    const int64_t step = j.progress().step(), total = j.progress().total_steps();
    const auto now = std::chrono::steady_clock::now();
    if (first_step_ < 0 && step > 0) {
      first_step_ = step;
      first_ = now;
    }
    std::string eta = "-";
    const double elapsed = std::chrono::duration<double>(now - first_).count();
    if (first_step_ >= 0 && step > first_step_ && elapsed > 0) {
      eta = clock_text((total - step) * elapsed / (step - first_step_));
    }
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * step / total) : 0;
    const std::string line =
        total == 0 ? absl::StrFormat("job %s %-9s (no step reported yet)", j.id(), state_name(j.state()))
                   : absl::StrFormat("job %s %-9s [%s%s] %d/%d steps  loss %s  ETA %s", j.id(), state_name(j.state()),
                                     std::string(filled, '#'), std::string(kWidth - filled, '.'), step, total,
                                     loss_text(j), eta);
    const int64_t tenth = total > 0 ? step * 10 / total : 0;
    if (tty_) {
      err_ << "\r" << line << std::flush;
    } else if (tenth != last_tenth_ || j.state() != last_state_) {
      err_ << line << "\n";
    }
    last_tenth_ = tenth;
    last_state_ = j.state();
  }
  void done() {
    if (tty_) err_ << "\n";
  }

 private:
  std::ostream& err_;
  const bool tty_;
  int64_t first_step_ = -1;
  std::chrono::steady_clock::time_point first_;
  int64_t last_tenth_ = -1;
  v1::JobState last_state_ = v1::JOB_STATE_UNSPECIFIED;
};

struct Client {
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::string token;
  std::unique_ptr<grpc::ClientContext> context() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    add_token(*ctx, token);
    return ctx;
  }
};

}  // namespace

int run_zeroctl(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"zeroctl: submit, follow and manage zerod jobs"};
  const char* env_address = std::getenv("ZEROD_ADDRESS");
  std::string address = env_address ? env_address : "127.0.0.1:7070", token_file, tls_ca;
  bool json = false;
  app.add_option("--address", address, "zerod's address (default: $ZEROD_ADDRESS or 127.0.0.1:7070)");
  app.add_option("--token-file", token_file, "file holding the bearer token (default: $ZEROD_TOKEN)");
  app.add_option("--tls-ca", tls_ca, "PEM certificate to trust: talk TLS");
  app.add_flag("--json", json, "print JSON instead of tables");
  app.require_subcommand(1);
  app.footer(
      "zeroctl estimate --config JOB [--ranks N] [--gpu-memory SIZE] ...: a job's memory before it runs, with no "
      "zerod (zeroctl estimate --help)\n"
      "zeroctl tokenize --tokenizer MODEL_DIR --output FILE [--seq-len N] INPUT...: text, JSONL and JSON (documents, "
      "instruction data, chats through the model's template) into token files (zeroctl tokenize --help)");

  std::string config_path, name, job_id;
  std::vector<std::string> overrides, hosts, states;
  int np = 1, max_restarts = 0, rank = 0;
  double hang_timeout = 0;
  bool wait = false, follow = false;
  CLI::App* submit = app.add_subcommand("submit", "submit a job config; prints the job id");
  submit->add_option("config", config_path, "job config (JSON)")->required();
  submit->add_option("--np", np, "ranks")->capture_default_str();
  submit->add_option("--name", name, "a name for people");
  submit->add_option("--host", hosts, "host or host:slots to run on (repeatable; default: zerod's machine)");
  submit->add_option("--max-restarts", max_restarts, "relaunches after a failed attempt")->capture_default_str();
  submit->add_option("--hang-timeout", hang_timeout, "seconds without progress that fail an attempt (0: zerod's)");
  submit->add_option("--set", overrides, "override a config key: key.path=value (JSON value)");
  submit->add_flag("--wait", wait, "follow the job to its end with a progress bar; exit 0 only if it succeeded");
  CLI::App* list = app.add_subcommand("list", "list jobs");
  list->add_option("--state", states, "only jobs in this state (repeatable)");
  CLI::App* status = app.add_subcommand("status", "a job's state, progress, attempts and failure");
  status->add_option("job", job_id, "job id")->required();
  CLI::App* logs = app.add_subcommand("logs", "print a rank's log");
  logs->add_option("job", job_id, "job id")->required();
  logs->add_option("--rank", rank, "whose log (-1: mpirun's own output)")->capture_default_str();
  logs->add_flag("--follow,-f", follow, "keep printing until the job ends");
  CLI::App* cancel = app.add_subcommand("cancel", "cancel a job and wait until its processes are gone");
  cancel->add_option("job", job_id, "job id")->required();
  if (auto code = parse_command_line(app, "zeroctl", out, err, [&] { app.parse(argc, argv); })) return *code;
  const auto fail = [&](int code, const std::string& why) {
    err << "zeroctl: " << why << "\n";
    return code;
  };
  const auto rpc_failed = [&](const grpc::Status& s) {
    return fail(exit_code(s), s.error_code() == grpc::StatusCode::UNAVAILABLE
                                  ? absl::StrCat("zerod at ", address, " is unreachable: ", s.error_message())
                                  : s.error_message());
  };
  absl::StatusOr<std::string> token = load_token(token_file);
  if (!token.ok()) return fail(kExitBadInput, std::string(token.status().message()));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = open_channel(address, tls_ca);
  if (!channel.ok()) return fail(kExitBadInput, std::string(channel.status().message()));
  Client c{v1::Coordinator::NewStub(*channel), *token};

  // Follows a job to its end; its last state.
  const auto watch = [&](const std::string& id, ProgressBar* bar, v1::Job* last) -> grpc::Status {
    auto ctx = c.context();
    v1::WatchJobRequest req;
    req.set_job_id(id);
    auto reader = c.stub->WatchJob(ctx.get(), req);
    v1::Job j;
    while (reader->Read(&j)) {
      if (bar) bar->show(j);
      *last = j;
    }
    if (bar) bar->done();
    return reader->Finish();
  };

  if (submit->parsed()) {
    // The config and hosts are checked here too, so that the message names the file.
    const std::string what = absl::StrCat("config file '", config_path, "'");
    std::error_code ec;
    if (!std::filesystem::is_regular_file(config_path, ec)) {
      return fail(kExitBadInput, absl::StrCat(what, std::filesystem::exists(config_path, ec) ? " is not a regular file"
                                                                                             : " cannot be opened"));
    }
    if (const uintmax_t size = std::filesystem::file_size(config_path, ec); !ec && size > kMaxConfigBytes) {
      return fail(kExitBadInput, absl::StrCat(what, " is ", size, " bytes; a job config is at most 1 MiB"));
    }
    std::optional<std::string> text = read_whole_file(config_path);
    if (!text) return fail(kExitBadInput, absl::StrCat(what, " cannot be opened"));
    absl::StatusOr<nlohmann::json> parsed = parse_strict_json(*text, what);  // UTF-8 too
    if (!parsed.ok()) return fail(kExitBadInput, std::string(parsed.status().message()));
    nlohmann::json& root = *parsed;
    if (!root.is_object()) return fail(kExitBadInput, absl::StrCat(what, " is not a JSON object"));
    v1::SubmitJobRequest req;
    req.set_config_json(*text);
    if (!overrides.empty()) {
      for (const std::string& o : overrides) {
        if (absl::Status s = apply_override(root, o); !s.ok()) return fail(kExitBadInput, std::string(s.message()));
      }
      req.set_config_json(root.dump());
    }
    req.set_name(name);
    req.set_world_size(np);
    for (const std::string& h : hosts) {
      if (absl::StatusOr<int> s = check_host(h); !s.ok()) {
        return fail(kExitBadInput, std::string(s.status().message()));
      }
      req.mutable_placement()->add_hosts(h);
    }
    req.mutable_restart()->set_max_restarts(max_restarts);
    req.mutable_restart()->set_hang_timeout_s(hang_timeout);
    v1::SubmitJobResponse resp;
    grpc::Status s = c.stub->SubmitJob(c.context().get(), req, &resp);
    if (!s.ok()) return rpc_failed(s);
    if (!wait) {
      out << (json ? to_json(resp) : resp.job_id()) << "\n";
      return kExitOk;
    }
    err << "job " << resp.job_id() << " submitted\n";
    ProgressBar bar(err);
    v1::Job last;
    s = watch(resp.job_id(), &bar, &last);
    if (!s.ok()) return rpc_failed(s);
    out << (json ? to_json(last) : outcome_line(last)) << "\n";
    return last.state() == v1::SUCCEEDED ? kExitOk : kExitFailure;
  }
  if (list->parsed()) {
    v1::ListJobsRequest req;
    for (const std::string& name_of_state : states) {
      v1::JobState st;
      if (!v1::JobState_Parse(name_of_state, &st) || st == v1::JOB_STATE_UNSPECIFIED) {
        return fail(kExitBadInput, absl::StrCat("--state '", name_of_state,
                                                "': one of PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED"));
      }
      req.add_states(st);
    }
    v1::ListJobsResponse resp;
    grpc::Status s = c.stub->ListJobs(c.context().get(), req, &resp);
    if (!s.ok()) return rpc_failed(s);
    if (json) {
      out << to_json(resp) << "\n";
      return kExitOk;
    }
    out << absl::StrFormat("%-6s %-20s %-10s %5s %13s %10s %8s  %s\n", "ID", "NAME", "STATE", "RANKS", "STEP", "LOSS",
                           "ATTEMPTS", "SUBMITTED");
    for (const v1::Job& j : resp.jobs()) {
      out << absl::StrFormat("%-6s %-20s %-10s %5d %13s %10s %8d  %s\n", j.id(), j.spec().name().substr(0, 20),
                             state_name(j.state()), j.spec().world_size(),
                             absl::StrCat(j.progress().step(), "/", j.progress().total_steps()), loss_text(j),
                             j.attempts_size(), when(j.submitted_unix_ms()));
    }
    return kExitOk;
  }
  if (status->parsed()) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::Job j;
    grpc::Status s = c.stub->GetJob(c.context().get(), req, &j);
    if (!s.ok()) return rpc_failed(s);
    if (json) {
      out << to_json(j) << "\n";
      return kExitOk;
    }
    out << "job:        " << j.id() << (j.spec().name().empty() ? "" : " (" + j.spec().name() + ")") << "\n"
        << "state:      " << state_name(j.state()) << "\n"
        << (j.unrecorded().empty() ? "" : "unrecorded: " + j.unrecorded() + "\n")
        << "ranks:      " << j.spec().world_size() << "\n"
        << "progress:   step " << j.progress().step() << "/" << j.progress().total_steps() << ", loss " << loss_text(j)
        << ", " << absl::StrFormat("%.0f", j.progress().tokens_per_s()) << " tokens/s\n"
        << (j.progress().has_eval_loss()
                ? absl::StrFormat("eval:       loss %.6f after step %d, best %.6f\n", j.progress().eval_loss(),
                                  j.progress().eval_step(), j.progress().best_eval_loss())
                : "")
        << "submitted:  " << when(j.submitted_unix_ms()) << "\n"
        << "finished:   " << when(j.finished_unix_ms()) << "\n"
        << "directory:  " << j.directory() << "\n";
    for (const v1::Attempt& a : j.attempts()) {
      out << "attempt " << a.number() << ":  " << state_name(a.state()) << ", started " << when(a.started_unix_ms())
          << (a.failure().reason().empty() ? "" : "; " + a.failure().reason()) << "\n";
    }
    if (!j.first_failure().reason().empty()) {
      out << "first failure: " << j.first_failure().reason() << "\n";
      for (const std::string& line : j.first_failure().last_log_lines()) out << "  | " << line << "\n";
    }
    return kExitOk;
  }
  if (logs->parsed()) {
    v1::StreamLogsRequest req;
    req.set_job_id(job_id);
    req.set_rank(rank);
    req.set_follow(follow);
    auto ctx = c.context();
    auto reader = c.stub->StreamLogs(ctx.get(), req);
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) out << chunk.data() << std::flush;
    grpc::Status s = reader->Finish();
    return s.ok() ? kExitOk : rpc_failed(s);
  }
  // cancel
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  v1::Job j;
  grpc::Status s = c.stub->CancelJob(c.context().get(), req, &j);
  if (!s.ok()) return rpc_failed(s);
  if (!is_terminal(j.state())) {
    s = watch(job_id, nullptr, &j);
    if (!s.ok()) return rpc_failed(s);
  }
  out << (json ? to_json(j) : absl::StrCat("job ", j.id(), " ", state_name(j.state()))) << "\n";
  return kExitOk;
}

}  // namespace zerod
