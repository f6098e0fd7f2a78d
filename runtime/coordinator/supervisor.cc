// The supervisor's start, its recovery of running jobs, and the calls of
// clients and workers (supervisor.h). The attempts' lifecycle is in
// supervisor_attempts.cc, how one failed in supervisor_diagnosis.cc, ends
// the store has yet to take in supervisor_records.cc, the queue in
// supervisor_queue.cc.
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

void Supervisor::note(const std::string& id, const std::string& what) {
  fprintf(stderr, "zerod: job %s: %s\n", id.c_str(), what.c_str());
}

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

namespace {

// Appends x to s, halving s's resolution first where it is full (every
// other point goes, the whole run kept).
template <class T>
void add_bounded(std::vector<T>& s, const T& x, size_t most) {
  if (s.size() >= most) {
    size_t kept = 0;
    for (size_t i = 0; i < s.size(); i += 2) s[kept++] = s[i];
    s.resize(kept);
  }
  s.push_back(x);
}

template <class T>
std::vector<T> series_of(const std::map<std::string, std::vector<T>>& all, const std::string& id) {
  const auto it = all.find(id);
  return it == all.end() ? std::vector<T>{} : it->second;
}

}  // namespace

void Supervisor::add_point_locked(const Attempt& a, const v1::Progress& p) {
  Point pt{now_ms(), a.number, p.step(), p.loss(), p.tokens_per_s(), {}};
  for (const auto& [rank, r] : a.ranks) {
    for (int t = 0; t < kNumTiers; ++t) pt.memory[t] += r.memory[t];
  }
  add_bounded(series_[a.job_id], pt, kMaxPoints);
}

std::vector<Supervisor::Point> Supervisor::series(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return series_of(series_, id);
}

std::vector<Supervisor::EvalPoint> Supervisor::eval_series(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return series_of(eval_series_, id);
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
  r.memory[static_cast<int>(Tier::kHost)] =
      req.host_memory_bytes() - std::min(req.host_memory_bytes(), req.pinned_memory_bytes());
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
      const bool evaluated =
          req.progress().has_eval_loss() && (!p.has_eval_loss() || p.eval_step() != req.progress().eval_step());
      p = req.progress();
      a.unsaved = true;
      changed();
      if (stepped) add_point_locked(a, p);
      if (evaluated) add_bounded(eval_series_[a.job_id], EvalPoint{a.number, p.eval_step(), p.eval_loss()}, kMaxPoints);
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

}  // namespace zerod
