// The queue: pending jobs start first come, first served as slots free up;
// a store that refuses a new attempt holds the queue until it takes it.
#include "absl/strings/str_cat.h"
#include "runtime/coordinator/supervisor.h"

namespace zerod {

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
