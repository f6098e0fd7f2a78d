#include "runtime/coordinator/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
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

// zerod's own log (its stderr): one line per event of a job.
void note(const std::string& id, const std::string& what) {
  fprintf(stderr, "zerod: job %s: %s\n", id.c_str(), what.c_str());
}

// The highest numbered job directory under `jobs` (0 when there is none).
int64_t last_job_dir(const std::string& jobs) {
  int64_t last = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(jobs, ec)) {
    int64_t n = 0;
    if (absl::SimpleAtoi(e.path().filename().string(), &n)) last = std::max(last, n);
  }
  return last;
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
  const std::string db = options.state_dir + "/zerod.db";
  ZEROD_ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store,
                         JobStore::open(db, last_job_dir(options.state_dir + "/jobs")));
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
  return rank < 0 ? absl::StrCat(job_dir(id), "/launcher.log") : rank_log_path(job_dir(id), rank);
}

std::string Supervisor::tag(const std::string& id, int attempt) const {
  return absl::StrCat(options_.state_dir, "#", id, "#", attempt);
}

int64_t Supervisor::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status Supervisor::recover() {
  std::lock_guard<std::mutex> control(control_mu_);
  ZEROD_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->list({v1::RUNNING}));
  for (const v1::Job& job : jobs) {
    const int n = job.attempts_size();
    if (n == 0 || job.attempts(n - 1).state() != v1::RUNNING) {
      // The previous zerod stopped between an attempt's end and what follows it.
      End e;
      e.number = n;
      e.attempt_state = n ? job.attempts(n - 1).state() : v1::FAILED;
      if (e.attempt_state != v1::FAILED) {
        e.job_state = e.attempt_state;
      } else if (n - 1 >= job.spec().restart().max_restarts()) {
        e.job_state = v1::FAILED;
      }
      e.at_ms = now_ms();
      e.spec = job.spec();
      settle(job.id(), std::move(e));
      continue;
    }
    Attempt a;
    a.job_id = job.id();
    a.number = n;
    a.spec = job.spec();
    a.tag = tag(job.id(), n);
    a.progressed = Clock::now();
    a.saved = Clock::now();
    const bool gone = tagged_processes(a.tag).empty();
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_[job.id()] = std::move(a);
      progress_[job.id()] = job.progress();
    }
    // Its workers outlived the previous zerod: watch them again. Otherwise
    // it ended unseen, and is judged by the exit records its ranks left.
    if (!gone) {
      note(job.id(), absl::StrCat("attempt ", n, " taken over: its processes are still running"));
      continue;
    }
    for (int r = 0; r < job.spec().world_size(); ++r) {
      const std::optional<std::string> bytes = read_whole_file(exit_record_path(job_dir(job.id()), r));
      v1::ReportExitRequest exit;
      if (bytes && exit.ParseFromString(*bytes) && exit.worker().job_id() == job.id() && exit.worker().attempt() == n &&
          exit.worker().rank() == r) {
        std::lock_guard<std::mutex> lock(mu_);
        take_exit_locked(running_.at(job.id()), exit);
      }
    }
    end_attempt(job.id(), std::nullopt);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> Supervisor::submit(const v1::SubmitJobRequest& request) {
  ZEROD_ASSIGN_OR_RETURN(nlohmann::json config, prepare_job(request, options_.rules));
  const std::vector<std::string> hosts(request.placement().hosts().begin(), request.placement().hosts().end());
  if (absl::Status s = check_hosts_reachable(hosts, options_.mca, options_.reach_timeout_s); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(s.message(), "; nothing was submitted"));
  }
  absl::StatusOr<v1::Job> added = store_->add(request, now_ms());
  if (!added.ok()) {
    return absl::UnavailableError(
        absl::StrCat("zerod cannot record a new job now (", added.status().message(), "); nothing was submitted"));
  }
  const v1::Job& job = *added;
  const std::string dir = job_dir(job.id());
  std::error_code ec;
  const bool created = fs::create_directory(dir, ec);
  absl::Status written =
      !created ? absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec ? ec.message() : "it exists already"))
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
  overlay_locked(job);
  return job;
}

absl::StatusOr<std::vector<v1::Job>> Supervisor::list(const std::vector<v1::JobState>& states) {
  ZEROD_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->list(states));
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::Job& job : jobs) overlay_locked(job);
  return jobs;
}

void Supervisor::add_point_locked(const Attempt& a, const v1::Progress& p) {
  std::vector<Point>& s = series_[a.job_id];
  if (s.size() >= kMaxPoints) {
    // Half the resolution, the whole run kept: every other point goes.
    size_t kept = 0;
    for (size_t i = 0; i < s.size(); i += 2) s[kept++] = s[i];
    s.resize(kept);
  }
  Point pt{now_ms(), a.number, p.step(), p.loss(), p.tokens_per_s(), {}};
  for (const auto& [rank, r] : a.ranks) {
    for (int t = 0; t < kNumTiers; ++t) pt.memory[t] += r.memory[t];
  }
  s.push_back(pt);
}

std::vector<Supervisor::Point> Supervisor::series(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = series_.find(id);
  return it == series_.end() ? std::vector<Point>{} : it->second;
}

absl::StatusOr<std::vector<Supervisor::JobMetrics>> Supervisor::metrics() {
  ZEROD_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->list({}));
  std::vector<JobMetrics> out;
  out.reserve(jobs.size());
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::Job& job : jobs) {
    overlay_locked(job);
    JobMetrics m;
    if (auto it = running_.find(job.id()); it != running_.end()) {
      for (const auto& [rank, r] : it->second.ranks) {
        for (int t = 0; t < kNumTiers; ++t) m.memory[t] += r.memory[t];
        m.heartbeat_age_s = std::max(m.heartbeat_age_s, std::chrono::duration<double>(now - r.heard).count());
      }
    }
    m.job = std::move(job);
    out.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<v1::Job> Supervisor::cancel(const std::string& id) {
  {
    std::lock_guard<std::mutex> control(control_mu_);
    ZEROD_ASSIGN_OR_RETURN(v1::Job job, store_->get(id));
    if (is_terminal(job.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " is already ", v1::JobState_Name(job.state()), "; there is nothing to cancel"));
    }
    bool running = false;
    std::optional<End> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      running = running_.count(id) > 0;
      if (auto u = unrecorded_.find(id); u != unrecorded_.end()) pending = u->second;
    }
    if (running) {
      stop(id, v1::CANCELLED, v1::Failure());
    } else if (pending) {
      if (pending->job_state) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", id, " has already ended ", v1::JobState_Name(*pending->job_state)));
      }
      pending->job_state = v1::CANCELLED;
      settle(id, std::move(*pending));
    } else {
      ZEROD_RETURN_IF_ERROR(store_->finish(id, v1::CANCELLED, now_ms()));
    }
    changed();
  }
  wake_.notify_all();
  return get(id);
}

absl::StatusOr<v1::RegisterWorkerResponse> Supervisor::register_worker(const v1::RegisterWorkerRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(req.worker().job_id());
  if (it != running_.end() && it->second.number == req.worker().attempt()) {
    Rank& r = it->second.ranks[req.worker().rank()];
    r.host = req.host();
    r.heard = Clock::now();
    // Its pid and group mean something on its host only: for people there.
    note(req.worker().job_id(), absl::StrCat("attempt ", req.worker().attempt(), " rank ", req.worker().rank(), " on ",
                                             r.host, ": pid ", req.pid(), ", process group ", req.pgid()));
  }
  v1::RegisterWorkerResponse resp;
  resp.set_heartbeat_interval_ms(static_cast<int64_t>(options_.heartbeat_interval_s * 1000));
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Supervisor::heartbeat(const v1::HeartbeatRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::HeartbeatResponse resp;
  auto it = running_.find(req.worker().job_id());
  if (it == running_.end() || it->second.number != req.worker().attempt() || it->second.stopping) {
    resp.set_stop(true);
    return resp;
  }
  Attempt& a = it->second;
  const int64_t step = req.progress().step();
  Rank& r = a.ranks[req.worker().rank()];
  r.step = step;
  r.heard = Clock::now();
  r.memory[static_cast<int>(Tier::kGpu)] = req.gpu_memory_bytes();
  r.memory[static_cast<int>(Tier::kPinned)] = req.pinned_memory_bytes();
  r.memory[static_cast<int>(Tier::kHost)] = req.host_memory_bytes() - std::min(req.host_memory_bytes(), req.pinned_memory_bytes());
  r.memory[static_cast<int>(Tier::kNvme)] = req.nvme_bytes();
  // Taken over after a restart: where the rank runs was the old zerod's.
  resp.set_register_again(r.host.empty());
  if (step > a.step) {
    a.step = step;
    a.progressed = Clock::now();
  }
  if (req.worker().rank() == 0 && req.has_progress()) {
    v1::Progress& p = progress_[a.job_id];
    if (p.SerializeAsString() != req.progress().SerializeAsString()) {
      const bool stepped = p.step() != req.progress().step();
      p = req.progress();
      a.unsaved = true;
      changed();
      if (stepped) add_point_locked(a, p);
    }
  }
  return resp;
}

absl::Status Supervisor::report_exit(const v1::ReportExitRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(req.worker().job_id());
  if (it != running_.end() && it->second.number == req.worker().attempt()) take_exit_locked(it->second, req);
  return absl::OkStatus();
}

void Supervisor::take_exit_locked(Attempt& a, const v1::ReportExitRequest& exit) {
  Rank& r = a.ranks[exit.worker().rank()];
  r.exit_code = exit.exit_code();
  r.signal = exit.signal();
  r.oom = exit.oom();
  if (exit.exit_code() != 0 && a.first_failed_rank < 0) a.first_failed_rank = exit.worker().rank();
  if (exit.signal() != 0 && a.first_killed_rank < 0) a.first_killed_rank = exit.worker().rank();
  if (exit.worker().rank() == 0 && exit.has_progress()) progress_[a.job_id] = exit.progress();
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
    a.kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_s));
    launcher = a.launcher;
    tag = a.tag;
  }
  signal_attempt(launcher, tag, SIGTERM);
}

std::optional<v1::Failure> Supervisor::lost_host_locked(const Attempt& a, Clock::time_point now) const {
  std::map<std::string, std::vector<int>> silent;  // by host: its ranks, while none of them is heard
  std::set<std::string> heard;
  for (const auto& [rank, r] : a.ranks) {
    if (r.host.empty()) continue;
    if (std::chrono::duration<double>(now - r.heard).count() <= options_.host_timeout_s) {
      heard.insert(r.host);
      silent.erase(r.host);
    } else if (!heard.count(r.host)) {
      silent[r.host].push_back(rank);
    }
  }
  if (silent.empty() || heard.empty()) return std::nullopt;
  const auto& [host, ranks] = *silent.begin();
  v1::Failure f;
  f.set_rank(-1);
  f.set_host(host);
  f.set_reason(absl::StrCat("host ", host, " stopped answering: no heartbeat from its ranks (",
                            absl::StrJoin(ranks, ", "), ") for over ", options_.host_timeout_s,
                            " s while the other hosts' came"));
  return f;
}

v1::Failure Supervisor::explain(const Attempt& a, std::optional<int> wait_status) const {
  v1::Failure f;
  f.set_rank(-1);
  std::string launcher_output;
  {
    std::ifstream in(log_path(a.job_id, -1), std::ios::binary);
    in.seekg(a.log_offset);
    launcher_output.assign(std::istreambuf_iterator<char>(in), {});
  }
  if (a.first_killed_rank >= 0) {
    // A kill a rank's agent saw is the cause: its peers may fail after
    // losing it, and mpirun may name one of them first.
    f.set_rank(a.first_killed_rank);
    f.set_signal(a.ranks.at(a.first_killed_rank).signal);
  } else if (auto r = parse_launcher_failure(launcher_output)) {
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
  if (auto it = a.ranks.find(f.rank()); it != a.ranks.end()) {
    f.set_host(it->second.host);
    // Read from the rank's own host's cgroup by its agent.
    f.set_oom(f.signal() == SIGKILL && it->second.oom);
  } else if (f.rank() < 0 && f.signal() == SIGKILL && a.oom_base) {
    // mpirun, in zerod's cgroup.
    const std::optional<int64_t> kills = oom_kills();
    f.set_oom(kills && *kills > *a.oom_base);
  }
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

void Supervisor::settle(const std::string& id, End end) {
  absl::Status s = write_end(id, end);
  if (s.ok() && !end.job_state) s = launch_attempt(id, end.spec);
  if (!s.ok() && end.error.empty()) note(id, absl::StrCat("kept in memory until the store takes it: ", s.message()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok()) {
      unrecorded_.erase(id);
    } else {
      end.error = std::string(s.message());
      unrecorded_[id] = std::move(end);
    }
  }
  changed();
}

absl::Status Supervisor::write_end(const std::string& id, const End& end) {
  // Each part is written once: a retry goes on where the last one stopped.
  ZEROD_ASSIGN_OR_RETURN(const v1::Job job, store_->get(id));
  if (is_terminal(job.state())) return absl::OkStatus();
  if (end.progress && end.progress->SerializeAsString() != job.progress().SerializeAsString()) {
    ZEROD_RETURN_IF_ERROR(store_->set_progress(id, *end.progress));
  }
  if (end.number >= 1 && end.number <= job.attempts_size() && job.attempts(end.number - 1).state() == v1::RUNNING) {
    ZEROD_RETURN_IF_ERROR(store_->end_attempt(id, end.number, end.attempt_state, end.failure, end.at_ms));
  }
  if (end.job_state) ZEROD_RETURN_IF_ERROR(store_->finish(id, *end.job_state, end.at_ms));
  return absl::OkStatus();
}

void Supervisor::overlay_locked(v1::Job& job) const {
  job.set_directory(job_dir(job.id()));
  if (auto it = progress_.find(job.id()); it != progress_.end() && !is_terminal(job.state())) {
    *job.mutable_progress() = it->second;
  }
  if (job.state() == v1::PENDING && !queue_error_.empty()) {
    job.set_unrecorded(absl::StrCat("it cannot start while the store refuses its attempt: ", queue_error_));
  }
  auto it = unrecorded_.find(job.id());
  if (it == unrecorded_.end() || is_terminal(job.state())) return;
  const End& e = it->second;
  job.set_unrecorded(e.error);
  if (e.progress) *job.mutable_progress() = *e.progress;
  if (e.number >= 1 && e.number <= job.attempts_size() && job.attempts(e.number - 1).state() == v1::RUNNING) {
    v1::Attempt* a = job.mutable_attempts(e.number - 1);
    a->set_state(e.attempt_state);
    a->set_ended_unix_ms(e.at_ms);
    *a->mutable_failure() = e.failure;
    if (e.attempt_state == v1::FAILED && job.first_failure().ByteSizeLong() == 0) {
      *job.mutable_first_failure() = e.failure;
    }
  }
  if (e.job_state) {
    job.set_state(*e.job_state);
    job.set_finished_unix_ms(e.at_ms);
  }
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

int Supervisor::used_slots_locked() const {
  int used = 0;
  for (const auto& [id, a] : running_) used += a.spec.world_size();
  return used;
}

void Supervisor::schedule() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reschedule_) return;
    reschedule_ = false;
  }
  absl::StatusOr<std::vector<v1::Job>> pending = store_->list({v1::PENDING});
  if (!pending.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    reschedule_ = true;  // try again at the next tick
    return;
  }
  // First come, first served: a big job is not starved by small ones behind it.
  for (const v1::Job& job : *pending) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (used_slots_locked() + job.spec().world_size() > options_.rules.slots) break;
    }
    if (absl::Status s = launch_attempt(job.id(), job.spec()); !s.ok()) {
      bool first = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        first = queue_error_.empty();
        queue_error_ = std::string(s.message());
        reschedule_ = true;  // the store may take it at the next tick
      }
      if (first) note(job.id(), absl::StrCat("waits: ", s.message()));
      changed();
      return;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_error_.empty()) changed();
  queue_error_.clear();
}

}  // namespace zerod
