#include "comm/mpi_arrivals.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerod {

namespace {
constexpr int kArrivalTag = 1;
}  // namespace

MpiArrivals::MpiArrivals() {
  MPI_Comm_dup(MPI_COMM_WORLD, &ctrl_);
  MPI_Comm_rank(ctrl_, &rank_);
  MPI_Comm_size(ctrl_, &world_);
  arrived_.assign(world_, 0);
}

MpiArrivals::~MpiArrivals() {
  reap(/*all=*/true);
  drain();
  MPI_Comm_free(&ctrl_);
}

void MpiArrivals::announce(int64_t seq) {
  reap(/*all=*/false);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    Announcement& a = announcements_.emplace_back();
    a.seq = seq;
    MPI_Isend(&a.seq, 1, MPI_INT64_T, peer, kArrivalTag, ctrl_, &a.request);
  }
}

void MpiArrivals::reap(bool all) {
  while (!announcements_.empty()) {
    int done = 0;
    if (all) {
      MPI_Wait(&announcements_.front().request, MPI_STATUS_IGNORE);
      done = 1;
    } else {
      MPI_Test(&announcements_.front().request, &done, MPI_STATUS_IGNORE);
    }
    if (!done) return;
    announcements_.pop_front();
  }
}

void MpiArrivals::drain() {
  for (;;) {
    int found = 0;
    MPI_Message msg;
    MPI_Status st;
    MPI_Improbe(MPI_ANY_SOURCE, kArrivalTag, ctrl_, &found, &msg, &st);
    if (!found) return;
    int64_t seq = 0;
    MPI_Mrecv(&seq, 1, MPI_INT64_T, &msg, MPI_STATUS_IGNORE);
    std::lock_guard<std::mutex> lock(mu_);
    arrived_[st.MPI_SOURCE] = std::max(arrived_[st.MPI_SOURCE], seq);
  }
}

std::string MpiArrivals::describe_missing(int64_t seq) {
  drain();
  std::vector<std::string> missing;
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 0; r < world_; ++r) {
    if (r != rank_ && arrived_[r] < seq) missing.push_back(absl::StrCat(r, " (last reached #", arrived_[r], ")"));
  }
  if (missing.empty()) return absl::StrCat("on rank ", rank_, " every rank has reached it");
  return absl::StrCat("on rank ", rank_, " waiting for rank", missing.size() > 1 ? "s " : " ",
                      absl::StrJoin(missing, ", "), " to arrive");
}

}  // namespace zerod
