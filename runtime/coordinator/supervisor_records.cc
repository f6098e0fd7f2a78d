// Ends the store has yet to take: written part by part, each part once, and
// tried again each tick while the store refuses them (a full disk).
#include "absl/strings/str_cat.h"
#include "runtime/coordinator/supervisor.h"

namespace zerod {

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

}  // namespace zerod
