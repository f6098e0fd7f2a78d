#include "runtime/coordinator/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace fs = std::filesystem;
namespace {

constexpr int kLogLinesKept = 20;
constexpr double kProgressSaveS = 2.0;  // heartbeats reach the store at most this often

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

// zerod's own log (its stderr): one line per event of a job.
void note(const std::string& id, const std::string& what) {
  fprintf(stderr, "zerod: job %s: %s\n", id.c_str(), what.c_str());
}

absl::Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Supervisor>> Supervisor::start(SupervisorOptions options) {
  std::error_code ec;
  fs::create_directories(fs::path(options.state_dir) / "jobs", ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("state directory '", options.state_dir, "': ", ec.message()));
  options.state_dir = fs::canonical(options.state_dir).string();
  ZEROD_ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::open(options.state_dir + "/zerod.db"));
  std::unique_ptr<Supervisor> s(new Supervisor(std::move(options), std::move(store)));
  ZEROD_RETURN_IF_ERROR(s->recover());
  s->thread_ = std::thread([p = s.get()] { p->loop(); });
  return s;
}

Supervisor::Supervisor(SupervisorOptions options, std::unique_ptr<JobStore> store)
    : options_(std::move(options)), store_(std::move(store)) {}

Supervisor::~Supervisor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Supervisor::job_dir(const std::string& id) const { return absl::StrCat(options_.state_dir, "/jobs/", id); }

std::string Supervisor::log_path(const std::string& id, int rank) const {
  return rank < 0 ? absl::StrCat(job_dir(id), "/launcher.log") : absl::StrCat(job_dir(id), "/rank-", rank, ".log");
}

std::string Supervisor::tag(const std::string& id, int attempt) const {
  return absl::StrCat(options_.state_dir, "#", id, "#", attempt);
}

int64_t Supervisor::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status Supervisor::recover() {
  std::lock_guard<std::mutex> lock(mu_);
  ZEROD_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->list({v1::RUNNING}));
  for (const v1::Job& job : jobs) {
    const int n = job.attempts_size();
    Attempt& a = running_[job.id()];
    a.job_id = job.id();
    a.number = n;
    a.spec = job.spec();
    a.tag = tag(job.id(), n);
    a.progressed = Clock::now();
    a.saved = Clock::now();
    progress_[job.id()] = job.progress();
    // Its workers outlived the previous zerod: watch them again. Otherwise
    // it ended unseen, and is judged as any attempt whose processes are gone.
    if (tagged_processes(a.tag).empty()) {
      ended_locked(a, std::nullopt);
    } else {
      note(job.id(), absl::StrCat("attempt ", n, " taken over: its processes are still running"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> Supervisor::submit(const v1::SubmitJobRequest& request) {
  ZEROD_ASSIGN_OR_RETURN(nlohmann::json config, prepare_job(request, options_.rules));
  ZEROD_ASSIGN_OR_RETURN(v1::Job job, store_->add(request, now_ms()));
  const std::string dir = job_dir(job.id());
  std::error_code ec;
  fs::create_directories(dir, ec);
  absl::Status written = ec ? absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()))
                            : write_file(dir + "/job.json", config.dump(2) + "\n");
  if (!written.ok()) {
    store_->finish(job.id(), v1::FAILED, now_ms()).IgnoreError();
    return written;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    reschedule_ = true;
  }
  changed();
  wake_.notify_all();
  return get(job.id());
}

absl::StatusOr<v1::Job> Supervisor::get(const std::string& id) {
  ZEROD_ASSIGN_OR_RETURN(v1::Job job, store_->get(id));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = progress_.find(id); it != progress_.end() && !is_terminal(job.state())) {
    *job.mutable_progress() = it->second;
  }
  job.set_directory(job_dir(id));
  return job;
}

absl::StatusOr<std::vector<v1::Job>> Supervisor::list(const std::vector<v1::JobState>& states) {
  ZEROD_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->list(states));
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::Job& job : jobs) {
    if (auto it = progress_.find(job.id()); it != progress_.end() && !is_terminal(job.state())) {
      *job.mutable_progress() = it->second;
    }
    job.set_directory(job_dir(job.id()));
  }
  return jobs;
}

absl::StatusOr<v1::Job> Supervisor::cancel(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ZEROD_ASSIGN_OR_RETURN(v1::Job job, store_->get(id));
    if (is_terminal(job.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " is already ", v1::JobState_Name(job.state()), "; there is nothing to cancel"));
    }
    if (auto it = running_.find(id); it != running_.end()) {
      v1::Failure none;
      stop_locked(it->second, v1::CANCELLED, none);
    } else {
      ZEROD_RETURN_IF_ERROR(store_->finish(id, v1::CANCELLED, now_ms()));
    }
    changed();
  }
  wake_.notify_all();
  return get(id);
}

absl::StatusOr<int64_t> Supervisor::register_worker(const v1::RegisterWorkerRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(req.worker().job_id());
  if (it != running_.end() && it->second.number == req.worker().attempt()) {
    Rank& r = it->second.ranks[req.worker().rank()];
    r.pid = req.pid();
    r.host = req.host();
  }
  return static_cast<int64_t>(options_.heartbeat_interval_s * 1000);
}

absl::StatusOr<bool> Supervisor::heartbeat(const v1::HeartbeatRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(req.worker().job_id());
  if (it == running_.end() || it->second.number != req.worker().attempt()) return true;
  Attempt& a = it->second;
  if (a.stopping) return true;
  const int64_t step = req.progress().step();
  a.ranks[req.worker().rank()].step = step;
  if (step > a.step) {
    a.step = step;
    a.progressed = Clock::now();
  }
  if (req.worker().rank() == 0 && req.has_progress()) {
    v1::Progress& p = progress_[a.job_id];
    if (p.SerializeAsString() != req.progress().SerializeAsString()) {
      p = req.progress();
      changed();
      if (Clock::now() - a.saved > std::chrono::duration<double>(kProgressSaveS)) {
        store_->set_progress(a.job_id, p).IgnoreError();  // only ahead of a later save
        a.saved = Clock::now();
      }
    }
  }
  return false;
}

absl::Status Supervisor::report_exit(const v1::ReportExitRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(req.worker().job_id());
  if (it != running_.end() && it->second.number == req.worker().attempt()) {
    it->second.ranks[req.worker().rank()].exit_code = req.exit_code();
    if (req.exit_code() != 0 && it->second.first_failed_rank < 0) it->second.first_failed_rank = req.worker().rank();
  }
  return absl::OkStatus();
}

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
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  std::vector<std::pair<std::string, std::optional<int>>> ended;
  for (auto& [id, a] : running_) {
    if (a.launcher > 0) {
      int status = 0;
      if (waitpid(a.launcher, &status, WNOHANG) == a.launcher) {
        ended.emplace_back(id, status);
        continue;
      }
    } else if (tagged_processes(a.tag).empty()) {
      ended.emplace_back(id, std::nullopt);
      continue;
    }
    const double timeout = a.spec.restart().hang_timeout_s() > 0 ? a.spec.restart().hang_timeout_s()
                                                                  : options_.hang_timeout_s;
    const double quiet = std::chrono::duration<double>(now - a.progressed).count();
    if (!a.stopping && quiet > timeout) {
      v1::Failure f;
      f.set_rank(-1);
      std::vector<std::string> steps;
      for (const auto& [rank, r] : a.ranks) steps.push_back(absl::StrCat(rank, ":", r.step));
      f.set_reason(absl::StrCat("no progress for ", absl::SixDigits(quiet), " s (hang timeout ", timeout,
                                " s); the last step of each rank (rank:step): ",
                                steps.empty() ? "none reported" : absl::StrJoin(steps, " ")));
      stop_locked(a, v1::FAILED, f);
    }
    if (a.stopping && now >= a.kill_at) signal_attempt(a.launcher, a.tag, SIGKILL);
  }
  for (auto& [id, status] : ended) ended_locked(running_.at(id), status);
  schedule_locked();
}

void Supervisor::stop_locked(Attempt& a, v1::JobState verdict, const v1::Failure& failure) {
  // A cancel overrides a failure being handled; nothing overrides a cancel.
  if (a.verdict == v1::CANCELLED) return;
  if (a.stopping && verdict != v1::CANCELLED) return;
  a.verdict = verdict;
  a.failure = failure;
  if (!a.stopping) {
    a.stopping = true;
    a.kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_s));
    signal_attempt(a.launcher, a.tag, SIGTERM);
  }
}

v1::Failure Supervisor::explain_locked(const Attempt& a, std::optional<int> wait_status) const {
  v1::Failure f;
  f.set_rank(-1);
  std::string launcher_output;
  {
    std::ifstream in(log_path(a.job_id, -1), std::ios::binary);
    in.seekg(a.log_offset);
    launcher_output.assign(std::istreambuf_iterator<char>(in), {});
  }
  if (auto r = parse_launcher_failure(launcher_output)) {
    f.set_rank(r->rank);
    f.set_exit_code(r->exit_code);
    f.set_signal(r->signal);
  } else if (a.first_failed_rank >= 0) {
    // mpirun's report can be missing (Open MPI loses it when several ranks
    // abort at once); the workers said it before aborting.
    f.set_rank(a.first_failed_rank);
    f.set_exit_code(*a.ranks.at(a.first_failed_rank).exit_code);
  } else if (wait_status) {
    if (WIFSIGNALED(*wait_status)) f.set_signal(WTERMSIG(*wait_status));
    if (WIFEXITED(*wait_status)) f.set_exit_code(WEXITSTATUS(*wait_status));
  }
  if (f.signal() == SIGKILL && a.oom_base) {
    const std::optional<int64_t> kills = oom_kills();
    f.set_oom(kills && *kills > *a.oom_base);
  }
  if (auto it = a.ranks.find(f.rank()); it != a.ranks.end()) f.set_host(it->second.host);
  const std::string who = f.rank() >= 0 ? absl::StrCat("rank ", f.rank(), f.host().empty() ? "" : " on ", f.host())
                                        : std::string("mpirun");
  if (f.oom()) {
    f.set_reason(absl::StrCat(who, " was killed by the kernel's OOM killer"));
  } else if (f.signal() != 0) {
    f.set_reason(absl::StrCat(who, " was killed by ", signal_name(f.signal())));
  } else if (f.exit_code() != 0) {
    f.set_reason(absl::StrCat(who, " exited with status ", f.exit_code(),
                              f.exit_code() == 2 ? " (bad input)" : f.exit_code() == 1 ? " (run failure)" : ""));
  } else {
    f.set_reason("the attempt's processes ended while zerod was not running, and no exit was reported");
  }
  return f;
}

void Supervisor::ended_locked(Attempt& a, std::optional<int> wait_status) {
  // Whatever is left of the attempt goes now (mpirun is reaped, so only the
  // tagged processes are signalled).
  signal_attempt(-1, a.tag, SIGKILL);
  const std::string id = a.job_id;
  const int number = a.number;
  const v1::SubmitJobRequest spec = a.spec;
  bool reported_ok = static_cast<int>(a.ranks.size()) == spec.world_size();
  for (const auto& [rank, r] : a.ranks) reported_ok = reported_ok && r.exit_code == 0;
  const bool ok = wait_status ? WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == 0 : reported_ok;
  v1::JobState outcome = ok ? v1::SUCCEEDED : v1::FAILED;
  v1::Failure failure;
  if (a.verdict) {
    outcome = *a.verdict;
    failure = a.failure;
  } else if (!ok) {
    failure = explain_locked(a, wait_status);
  }
  if (outcome == v1::FAILED) {
    for (const std::string& line : last_lines(log_path(id, std::max(failure.rank(), 0)), kLogLinesKept)) {
      failure.add_last_log_lines(line);
    }
  }
  note(id, absl::StrCat("attempt ", number, " ", v1::JobState_Name(outcome),
                        failure.reason().empty() ? "" : ": " + failure.reason()));
  running_.erase(id);
  reschedule_ = true;
  if (auto it = progress_.find(id); it != progress_.end()) store_->set_progress(id, it->second).IgnoreError();
  const int64_t now = now_ms();
  absl::Status s;
  if (outcome == v1::CANCELLED || outcome == v1::SUCCEEDED) {
    s = store_->end_attempt(id, number, outcome, failure, now);
    if (s.ok()) s = store_->finish(id, outcome, now);
  } else {
    s = store_->end_attempt(id, number, v1::FAILED, failure, now);
    if (s.ok()) {
      if (number - 1 < spec.restart().max_restarts()) {
        launch_locked(id, spec);
      } else {
        s = store_->finish(id, v1::FAILED, now);
      }
    }
  }
  if (!s.ok()) note(id, std::string(s.message()));
  progress_.erase(id);
  changed();
}

absl::Status Supervisor::fail_job_locked(const std::string& id, const std::string& reason) {
  v1::Failure f;
  f.set_rank(-1);
  f.set_reason(reason);
  ZEROD_ASSIGN_OR_RETURN(v1::Job job, store_->get(id));
  const int n = job.attempts_size();
  if (n > 0 && job.attempts(n - 1).state() == v1::RUNNING) {
    ZEROD_RETURN_IF_ERROR(store_->end_attempt(id, n, v1::FAILED, f, now_ms()));
  }
  return store_->finish(id, v1::FAILED, now_ms());
}

void Supervisor::launch_locked(const std::string& id, const v1::SubmitJobRequest& spec) {
  absl::StatusOr<int> number = store_->start_attempt(id, now_ms());
  if (!number.ok()) {
    note(id, std::string(number.status().message()));
    return;
  }
  const std::string dir = job_dir(id);
  LaunchSpec l;
  l.mpirun = options_.mpirun;
  l.worker = options_.worker;
  l.world_size = spec.world_size();
  l.hosts.assign(spec.placement().hosts().begin(), spec.placement().hosts().end());
  l.job_dir = dir;
  l.config = dir + "/job.json";
  l.tag = tag(id, *number);
  l.launcher_log = log_path(id, -1);
  if (*number > 1) {
    // A relaunch continues from the newest checkpoint, whatever the first
    // attempt started from.
    const std::optional<std::string> text = read_whole_file(l.config);
    const nlohmann::json config = nlohmann::json::parse(text.value_or(""), nullptr, false);
    if (config.is_object()) {
      const fs::path root = fs::path(dir) / checkpoint_root(config);
      if (latest_checkpoint(root.string()).ok()) l.overrides.push_back("run.resume=\"latest\"");
    }
    for (int r = 0; r < spec.world_size(); ++r) {
      std::ofstream(log_path(id, r), std::ios::app)
          << "----- zerod: attempt " << *number << " (restart " << *number - 1 << " of "
          << spec.restart().max_restarts() << ") -----\n";
    }
  }
  l.env = {{"ZEROD_COORDINATOR", options_.address},
           {"ZEROD_JOB_ID", id},
           {"ZEROD_ATTEMPT", absl::StrCat(*number)},
           {"ZEROD_TOKEN_FILE", options_.token_file},
           {"ZEROD_LOG_DIR", dir}};
  if (!options_.tls_ca.empty()) l.env.emplace_back("ZEROD_TLS_CA", options_.tls_ca);
  if (!getenv("OMP_NUM_THREADS")) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    l.env.emplace_back("OMP_NUM_THREADS", absl::StrCat(std::max(1, cores / spec.world_size())));
  }
  Attempt a;
  a.job_id = id;
  a.number = *number;
  a.spec = spec;
  a.tag = l.tag;
  a.progressed = a.saved = Clock::now();
  a.oom_base = oom_kills();
  std::error_code ec;
  a.log_offset = fs::exists(l.launcher_log) ? static_cast<int64_t>(fs::file_size(l.launcher_log, ec)) : 0;
  absl::StatusOr<pid_t> pid = launch(l);
  if (!pid.ok()) {
    if (absl::Status s = fail_job_locked(id, std::string(pid.status().message())); !s.ok()) {
      note(id, std::string(s.message()));
    }
    return;
  }
  a.launcher = *pid;
  note(id, absl::StrCat("attempt ", *number, " launched: ", spec.world_size(), " ranks, mpirun pid ", *pid));
  running_[id] = std::move(a);
  changed();
}

int Supervisor::used_slots_locked() const {
  int used = 0;
  for (const auto& [id, a] : running_) used += a.spec.world_size();
  return used;
}

void Supervisor::schedule_locked() {
  if (!reschedule_) return;
  reschedule_ = false;
  absl::StatusOr<std::vector<v1::Job>> pending = store_->list({v1::PENDING});
  if (!pending.ok()) {
    reschedule_ = true;  // try again at the next tick
    return;
  }
  // First come, first served: a big job is not starved by small ones behind it.
  for (const v1::Job& job : *pending) {
    if (used_slots_locked() + job.spec().world_size() > options_.rules.slots) break;
    launch_locked(job.id(), job.spec());
  }
}

}  // namespace zerod
