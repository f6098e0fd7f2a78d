// An attempt's life under the supervisor: launched with its environment,
// watched each tick (hangs, lost hosts, heartbeats saved), stopped (SIGTERM,
// then SIGKILL after the grace), and ended: how, and whether the job goes
// on to another attempt.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/coordinator/supervisor.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace fs = std::filesystem;
namespace {

constexpr int kLogLinesKept = 20;
constexpr double kProgressSaveS = 2.0;  // heartbeats reach the store at most this often

}  // namespace

void Supervisor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    wake_.wait_for(lock, std::chrono::duration<double>(options_.tick_s));
    if (quit_) break;
    lock.unlock();
    tick();
    lock.lock();
  }
}

void Supervisor::tick() {
  std::lock_guard<std::mutex> control(control_mu_);
  const Clock::time_point now = Clock::now();
  // What each attempt looks like now, and what is decided from it.
  struct Look {
    std::string id;
    pid_t launcher;
    std::string tag;
    bool kill;  // its grace is over
    std::optional<v1::Failure> hang;
    std::optional<v1::Progress> save;
  };
  std::vector<Look> looks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, a] : running_) {
      Look l{id, a.launcher, a.tag, a.stopping && now >= a.kill_at, std::nullopt, std::nullopt};
      const double timeout =
          a.spec.restart().hang_timeout_s() > 0 ? a.spec.restart().hang_timeout_s() : options_.hang_timeout_s;
      const double quiet = std::chrono::duration<double>(now - a.progressed).count();
      if (!a.stopping && quiet > timeout) {
        v1::Failure f;
        f.set_rank(-1);
        std::vector<std::string> steps;
        for (const auto& [rank, r] : a.ranks) steps.push_back(absl::StrCat(rank, ":", r.step));
        f.set_reason(absl::StrCat("no progress for ", absl::SixDigits(quiet), " s (hang timeout ", timeout,
                                  " s); the last step of each rank (rank:step): ",
                                  steps.empty() ? "none reported" : absl::StrJoin(steps, " ")));
        l.hang = f;
      } else if (!a.stopping) {
        l.hang = lost_host_locked(a, now);
        if (l.hang) a.lost_host = l.hang->host();
      }
      if (a.unsaved && now - a.saved > std::chrono::duration<double>(kProgressSaveS)) {
        l.save = progress_[id];
        a.unsaved = false;
        a.saved = now;
      }
      looks.push_back(std::move(l));
    }
  }
  for (const Look& l : looks) {
    // Heartbeats reach the store now and then, ahead of the attempt's end.
    if (l.save) store_->set_progress(l.id, *l.save).IgnoreError();
    int status = 0;
    if (l.launcher > 0 ? waitpid(l.launcher, &status, WNOHANG) == l.launcher : tagged_processes(l.tag).empty()) {
      end_attempt(l.id, l.launcher > 0 ? std::optional<int>(status) : std::nullopt);
      continue;
    }
    if (l.hang) stop(l.id, v1::FAILED, *l.hang);
    if (l.kill) signal_attempt(l.launcher, l.tag, SIGKILL);
  }
  std::vector<std::pair<std::string, End>> unrecorded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unrecorded.assign(unrecorded_.begin(), unrecorded_.end());
  }
  for (auto& [id, e] : unrecorded) settle(id, std::move(e));
  schedule();
}

void Supervisor::stop(const std::string& id, v1::JobState verdict, const v1::Failure& failure) {
  pid_t launcher = -1;
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = running_.find(id);
    if (it == running_.end()) return;
    Attempt& a = it->second;
    // A cancel overrides a failure being handled; nothing overrides a cancel.
    if (a.verdict == v1::CANCELLED) return;
    if (a.stopping && verdict != v1::CANCELLED) return;
    a.verdict = verdict;
    a.failure = failure;
    if (a.stopping) return;
    a.stopping = true;
    a.kill_at =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_s));
    launcher = a.launcher;
    tag = a.tag;
  }
  signal_attempt(launcher, tag, SIGTERM);
}

absl::Status Supervisor::launch_attempt(const std::string& id, const v1::SubmitJobRequest& spec) {
  ZEROD_ASSIGN_OR_RETURN(const int number, store_->start_attempt(id, now_ms()));
  const std::string dir = job_dir(id);
  LaunchSpec l;
  l.mpirun = options_.mpirun;
  l.mca = options_.mca;
  l.exports = options_.exports;
  l.worker = options_.worker;
  l.agent = options_.agent;
  l.world_size = spec.world_size();
  l.hosts.assign(spec.placement().hosts().begin(), spec.placement().hosts().end());
  l.job_dir = dir;
  l.config = dir + "/job.json";
  l.tag = tag(id, number);
  l.launcher_log = log_path(id, -1);
  if (number > 1) {
    // A relaunch continues from the newest checkpoint, whatever the first
    // attempt started from.
    const std::optional<std::string> text = read_whole_file(l.config);
    const nlohmann::json config = nlohmann::json::parse(text.value_or(""), nullptr, false);
    if (config.is_object()) {
      const fs::path root = fs::path(dir) / checkpoint_root(config);
      if (latest_checkpoint(root.string()).ok()) l.overrides.push_back("run.resume=\"latest\"");
    }
    for (int r = 0; r < spec.world_size(); ++r) {
      std::ofstream(log_path(id, r), std::ios::app) << "----- zerod: attempt " << number << " (restart " << number - 1
                                                    << " of " << spec.restart().max_restarts() << ") -----\n";
    }
  }
  l.env = {{"ZEROD_COORDINATOR", options_.address},
           {"ZEROD_JOB_ID", id},
           {"ZEROD_ATTEMPT", absl::StrCat(number)},
           {"ZEROD_TOKEN_FILE", options_.token_file},
           {"ZEROD_LOG_DIR", dir},
           {"ZEROD_LEASE_S", absl::StrCat(2 * options_.host_timeout_s)}};
  if (!options_.tls_ca.empty()) l.env.emplace_back("ZEROD_TLS_CA", options_.tls_ca);
  // Each rank chooses its CPU threads as any worker does (kernels/cpu/threads.h).
  Attempt a;
  a.job_id = id;
  a.number = number;
  a.spec = spec;
  a.tag = l.tag;
  a.progressed = a.saved = Clock::now();
  a.oom_base = oom_kills();
  std::error_code ec;
  a.log_offset = fs::exists(l.launcher_log) ? static_cast<int64_t>(fs::file_size(l.launcher_log, ec)) : 0;
  {
    // In place before its ranks exist, so their first calls find it; the
    // tick that would look at it waits for this launch.
    std::lock_guard<std::mutex> lock(mu_);
    running_[id] = std::move(a);
  }
  absl::StatusOr<pid_t> pid = launch(l);
  if (!pid.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_.erase(id);
    }
    note(id, absl::StrCat("attempt ", number, " cannot start: ", pid.status().message()));
    End e;
    e.number = number;
    e.failure.set_rank(-1);
    e.failure.set_reason(std::string(pid.status().message()));
    e.job_state = v1::FAILED;
    e.at_ms = now_ms();
    e.spec = spec;
    settle(id, std::move(e));
    return absl::OkStatus();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.at(id).launcher = *pid;
  }
  note(id, absl::StrCat("attempt ", number, " launched: ", spec.world_size(), " ranks",
                        l.hosts.empty() ? "" : " on " + absl::StrJoin(l.hosts, ","), ", mpirun pid ", *pid));
  changed();
  return absl::OkStatus();
}

void Supervisor::end_attempt(const std::string& id, std::optional<int> wait_status) {
  Attempt a;
  std::optional<v1::Progress> progress;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a = running_.at(id);
    if (auto it = progress_.find(id); it != progress_.end()) progress = it->second;
  }
  // Whatever is left of the attempt goes now (mpirun is reaped, so only the
  // tagged processes are signalled).
  signal_attempt(-1, a.tag, SIGKILL);
  const int number = a.number;
  const v1::SubmitJobRequest& spec = a.spec;
  bool reported_ok = static_cast<int>(a.ranks.size()) == spec.world_size();
  for (const auto& [rank, r] : a.ranks) reported_ok = reported_ok && r.exit_code == 0;
  const bool ok = wait_status ? WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == 0 : reported_ok;
  v1::JobState outcome = ok ? v1::SUCCEEDED : v1::FAILED;
  v1::Failure failure;
  if (a.verdict) {
    outcome = *a.verdict;
    failure = a.failure;
  } else if (!ok) {
    failure = explain(a, wait_status);
  }
  if (outcome == v1::FAILED) {
    for (const std::string& line : last_lines(log_path(id, std::max(failure.rank(), 0)), kLogLinesKept)) {
      failure.add_last_log_lines(line);
    }
  }
  note(id, absl::StrCat("attempt ", number, " ", v1::JobState_Name(outcome),
                        failure.reason().empty() ? "" : ": " + failure.reason()));
  End e;
  e.number = number;
  e.attempt_state = outcome;
  e.failure = failure;
  if (outcome != v1::FAILED || number - 1 >= spec.restart().max_restarts()) e.job_state = outcome;
  e.at_ms = now_ms();
  e.spec = spec;
  if (!a.lost_host.empty() && !e.job_state) {
    // The next attempt goes without the lost host, when the others have the slots.
    auto* hosts = e.spec.mutable_placement()->mutable_hosts();
    int slots = 0;
    for (int i = hosts->size() - 1; i >= 0; --i) {
      const std::string& entry = hosts->Get(i);
      if (entry.substr(0, entry.find(':')) == a.lost_host) {
        hosts->DeleteSubrange(i, 1);
      } else {
        slots += check_host(entry).value_or(0);
      }
    }
    if (slots < spec.world_size()) {
      e.job_state = v1::FAILED;
      e.failure.set_reason(absl::StrCat(e.failure.reason(), "; the hosts left give ", slots, " slots for ",
                                        spec.world_size(), " ranks"));
    }
  }
  e.progress = progress;
  {
    // From here clients see the end, until the store has it.
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(id);
    progress_.erase(id);
    unrecorded_[id] = e;
    reschedule_ = true;
  }
  settle(id, std::move(e));
}

}  // namespace zerod
