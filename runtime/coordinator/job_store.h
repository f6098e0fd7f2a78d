// The coordinator's records: jobs and their attempts, kept in SQLite (one
// file in zerod's state directory) so that a restart of zerod loses
// nothing. Records are the API's own messages (proto/zerod.proto).
//
// A job moves PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED (or from
// PENDING straight to FAILED or CANCELLED); a terminal state never changes.
// While RUNNING it has attempts, one at a time: each is started, then ended
// with its own outcome, and the supervisor either starts another (a
// restart) or finishes the job.
//
// Every method is one transaction, safe to call from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/zerod.pb.h"
#include "runtime/core/status.h"

struct sqlite3;

namespace zerod {

class JobStore {
 public:
  // Opens the database at `path`, creating it (not its directory) if absent.
  // Refuses a file that is not a job store, one of a newer format, and one
  // that cannot be written. `jobs_beside` is the highest id of the job
  // directories next to it: ids are never reused, so a store that has not
  // given it (missing, empty, older) is refused before anything is written.
  static absl::StatusOr<std::unique_ptr<JobStore>> open(const std::string& path, int64_t jobs_beside = 0);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Records a new PENDING job; returns it with its id.
  absl::StatusOr<v1::Job> add(const v1::SubmitJobRequest& spec, int64_t now_ms);
  // The highest id ever given (ids are never reused); 0 before the first job.
  absl::StatusOr<int64_t> last_id();
  // NotFound for an id the store does not hold.
  absl::StatusOr<v1::Job> get(const std::string& id);
  // Jobs in any of `states` (every job when empty), oldest first.
  absl::StatusOr<std::vector<v1::Job>> list(const std::vector<v1::JobState>& states = {});

  // Starts the job's next attempt (the job becomes RUNNING); its number.
  // Refused while an attempt is running or once the job is terminal.
  absl::StatusOr<int> start_attempt(const std::string& id, int64_t now_ms);
  // Ends running attempt `number` as SUCCEEDED, FAILED or CANCELLED; a
  // failure of the job's first failed attempt becomes its first_failure.
  absl::Status end_attempt(const std::string& id, int number, v1::JobState outcome, const v1::Failure& failure,
                           int64_t now_ms);
  // Moves the job to a terminal state, ending a running attempt with it.
  absl::Status finish(const std::string& id, v1::JobState state, int64_t now_ms);
  // The latest progress a worker reported.
  absl::Status set_progress(const std::string& id, const v1::Progress& progress);

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  absl::StatusOr<v1::Job> get_locked(const std::string& id);
  // Runs body(row id, job) on job `id` in one transaction, committed when it
  // succeeds; refused once the job is terminal.
  using Change = std::function<absl::Status(int64_t n, const v1::Job& job)>;
  absl::Status change(const std::string& id, const Change& body);

  std::mutex mu_;
  sqlite3* db_;
};

bool is_terminal(v1::JobState s);

}  // namespace zerod
