// The coordinator's logic, apart from gRPC: the queue of jobs waiting for
// slots, launching attempts, following their workers' heartbeats, deciding
// how an attempt ended (success, exit, signal, OOM, hang, cancel), stopping
// every process of an attempt, relaunching within max_restarts, and finding
// running jobs again when zerod itself restarts.
//
// Records go to the JobStore first; what is only in memory (the latest
// heartbeat of each rank) is rebuilt from the workers after a restart, and
// an attempt that ended while zerod was away is judged by the exit records
// its ranks left. When the store cannot be written (a full disk), how an
// attempt ended is kept in memory, shown to clients, and written once the
// store takes it; queued jobs wait for it without a new submit.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "proto/zerod.pb.h"
#include "runtime/coordinator/job_request.h"
#include "runtime/coordinator/job_store.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"

namespace zerod {

struct SupervisorOptions {
  std::string state_dir;  // zerod.db and jobs/<id>/
  std::string worker = "zero-worker";
  std::string agent = "zero-agent";  // started by mpirun for each rank, running its worker
  std::string mpirun = "mpirun";
  std::vector<std::pair<std::string, std::string>> mca;  // mpirun --mca settings of every launch
  std::vector<std::string> exports;  // variables of zerod's environment every rank gets, on any host
  std::string address;               // where workers reach this zerod
  std::string token_file;            // workers read the token here
  std::string tls_ca;                // workers trust this certificate (TLS only)
  JobRules rules;
  double hang_timeout_s = 300;  // a job's default
  // A host whose ranks have all been silent this long, while another
  // host's are heard, is lost: its attempt fails naming it, and the job
  // goes on without it. A rank that hears nothing from zerod for twice
  // this long stops itself (its lease, ZEROD_LEASE_S), so nothing of a lost
  // attempt outlives it on a host cut off.
  double host_timeout_s = 30;
  double grace_s = 10;  // SIGTERM, then this long, then SIGKILL
  double heartbeat_interval_s = 1;
  double tick_s = 0.1;          // how often attempts are checked
  double reach_timeout_s = 10;  // for each placement host to answer before a job is taken
};

class Supervisor {
 public:
  // Opens the records, finds the jobs that were running again, and starts
  // supervising.
  static absl::StatusOr<std::unique_ptr<Supervisor>> start(SupervisorOptions options);
  // Stops supervising. Running jobs keep running: a zerod started again on
  // the same state directory takes them over.
  ~Supervisor();

  absl::StatusOr<v1::Job> submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> get(const std::string& id);
  absl::StatusOr<std::vector<v1::Job>> list(const std::vector<v1::JobState>& states);
  absl::StatusOr<v1::Job> cancel(const std::string& id);

  // Worker calls. A call from an attempt that is no longer running is told
  // to stop.
  absl::StatusOr<v1::RegisterWorkerResponse> register_worker(const v1::RegisterWorkerRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> heartbeat(const v1::HeartbeatRequest& request);
  absl::Status report_exit(const v1::ReportExitRequest& request);

  // Every job as clients see it, and what only the running attempts'
  // heartbeats say: /metrics' figures.
  struct JobMetrics {
    v1::Job job;
    std::array<uint64_t, kNumTiers> memory{};  // summed over the running attempt's ranks
    double heartbeat_age_s = -1;               // its most silent rank's; -1: no rank heard in a running attempt
  };
  absl::StatusOr<std::vector<JobMetrics>> metrics();

  // A job's figures at each step rank 0 reported in a heartbeat, for the
  // dashboard's charts: kept in memory (a restarted zerod starts afresh),
  // at most kMaxPoints a job, every other one dropped when full.
  struct Point {
    int64_t unix_ms = 0;
    int attempt = 0;
    int64_t step = 0;
    double loss = 0, tokens_per_s = 0;
    std::array<uint64_t, kNumTiers> memory{};  // summed over the attempt's ranks
  };
  static constexpr size_t kMaxPoints = 4096;
  std::vector<Point> series(const std::string& id) const;
  // Each evaluation of the job's held-out set (data.eval) rank 0 reported:
  // its step and loss, kept as the points are.
  struct EvalPoint {
    int attempt = 0;
    int64_t step = 0;
    double loss = 0;
  };
  std::vector<EvalPoint> eval_series(const std::string& id) const;

  // Counts every change of any job (state, attempt, progress): a stream
  // compares it with the last it saw before reading again.
  uint64_t changes() const { return changes_.load(); }
  // The job's directory: config, rank logs, checkpoints.
  std::string job_dir(const std::string& id) const;
  // A rank's log (rank -1: mpirun's own output).
  std::string log_path(const std::string& id, int rank) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Rank {
    std::string host;
    Clock::time_point heard;  // its last registration or heartbeat
    int64_t step = -1;
    std::optional<int> exit_code;              // as the worker or its agent reported it
    int signal = 0;                            // what killed it, as its agent saw
    bool oom = false;                          // the OOM killer, by its host's cgroup
    std::array<uint64_t, kNumTiers> memory{};  // bytes in use by tier, its last heartbeat's
  };
  // The running attempt of a job.
  struct Attempt {
    std::string job_id;
    int number = 0;
    v1::SubmitJobRequest spec;
    pid_t launcher = -1;  // mpirun, our child; -1 when taken over after a restart
    std::string tag;
    std::map<int, Rank> ranks;
    Clock::time_point progressed;     // the last step any rank finished, or the launch
    int64_t step = -1;                // the highest step reported
    std::optional<int64_t> oom_base;  // OOM kills in zerod's cgroup (mpirun's) before the launch
    int first_failed_rank = -1;       // the first to report a non-zero exit
    int first_killed_rank = -1;       // the first whose agent reported it killed
    int64_t log_offset = 0;           // mpirun's output of this attempt starts here
    // Set once zerod decides to stop it (hang, cancel, a failed rank).
    bool stopping = false;
    Clock::time_point kill_at;
    std::optional<v1::JobState> verdict;  // CANCELLED, or FAILED with `failure`
    v1::Failure failure;
    std::string lost_host;    // the host whose silence failed it
    Clock::time_point saved;  // progress last written to the store
    bool unsaved = false;     // progress_ holds a heartbeat the store has not
  };

  // How an attempt ended and what follows for its job, as decided; kept in
  // memory until the store has taken all of it.
  struct End {
    int number = 0;  // the attempt
    v1::JobState attempt_state = v1::FAILED;
    v1::Failure failure;
    std::optional<v1::JobState> job_state;  // the job's end; none: its next attempt is launched
    int64_t at_ms = 0;
    v1::SubmitJobRequest spec;
    std::optional<v1::Progress> progress;  // the last the workers reported
    std::string error;                     // why the store has not taken it yet
  };

  Supervisor(SupervisorOptions options, std::unique_ptr<JobStore> store);
  void loop();

  // The control path: what runs and what the store says, one caller at a
  // time under control_mu_. It does the slow work (SQLite, spawning,
  // scanning /proc, signals, reading logs) without mu_, which it takes only
  // for moments, so workers' calls never wait behind that work.
  absl::Status recover();
  void tick();
  // Starts the job's next attempt, or ends the job when its processes
  // cannot be started; an error (nothing started) when the store did not
  // take the new attempt.
  absl::Status launch_attempt(const std::string& id, const v1::SubmitJobRequest& spec);
  // Decides to stop the running attempt of job `id` (SIGTERM now, SIGKILL
  // after the grace).
  void stop(const std::string& id, v1::JobState verdict, const v1::Failure& failure);
  // The attempt's processes are gone: record how it ended; relaunch or finish.
  void end_attempt(const std::string& id, std::optional<int> wait_status);
  v1::Failure explain(const Attempt& a, std::optional<int> wait_status) const;
  // With mu_ held: the host of `a` that has gone silent (see host_timeout_s),
  // as a failure; none while every host is heard or none has registered.
  std::optional<v1::Failure> lost_host_locked(const Attempt& a, Clock::time_point now) const;
  // Writes `end` to the store and, when the job goes on, launches it again;
  // what the store refuses stays in unrecorded_ and is tried again each tick.
  void settle(const std::string& id, End end);
  absl::Status write_end(const std::string& id, const End& end);
  void schedule();

  // With mu_ held.
  // A rank's exit, reported by the rank or found in its exit record.
  void take_exit_locked(Attempt& a, const v1::ReportExitRequest& exit);
  // A point of the job's series from rank 0's new progress.
  void add_point_locked(const Attempt& a, const v1::Progress& p);
  // The job as clients see it: the store's record with what only this
  // zerod knows (the latest heartbeat, an end not yet recorded).
  void overlay_locked(v1::Job& job) const;
  int used_slots_locked() const;

  std::string tag(const std::string& id, int attempt) const;
  // zerod's own log (its stderr): one line per event of a job.
  static void note(const std::string& id, const std::string& what);
  int64_t now_ms() const;
  void changed() { changes_.fetch_add(1); }

  const SupervisorOptions options_;
  std::unique_ptr<JobStore> store_;
  std::mutex control_mu_;
  // What workers' calls and clients' reads touch: the fields below, and
  // those of each Attempt that calls change (ranks, step, stopping, ...).
  mutable std::mutex mu_;
  std::map<std::string, Attempt> running_;            // by job id
  std::map<std::string, v1::Progress> progress_;      // latest heartbeats, ahead of the store
  std::map<std::string, std::vector<Point>> series_;  // by job id
  std::map<std::string, std::vector<EvalPoint>> eval_series_;
  std::map<std::string, End> unrecorded_;  // by job id
  std::string queue_error_;                // why the store refused to start the next job
  std::atomic<uint64_t> changes_{0};
  bool reschedule_ = true;  // a job arrived or slots were freed: look at the queue
  bool quit_ = false;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace zerod
