// Which collective each rank has reached, for naming the ranks a stuck
// collective waits for. Before running collective `seq` a rank announces it
// to every peer on a communicator of its own (a duplicate of
// MPI_COMM_WORLD, so the announcements never match a collective's
// messages); a rank whose wait times out reads what has arrived.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace zerod {

class MpiArrivals {
 public:
  // MPI is initialised (thread-multiple) and outlives the object.
  MpiArrivals();
  // Waits for this rank's announcements to go out.
  ~MpiArrivals();
  MpiArrivals(const MpiArrivals&) = delete;
  MpiArrivals& operator=(const MpiArrivals&) = delete;

  // This rank has reached collective `seq` (from one thread at a time).
  void announce(int64_t seq);
  // Receives every announcement that has arrived; safe from any thread.
  void drain();
  // "on rank R waiting for ranks 1 (last reached #4), ... to arrive", or
  // that every rank has reached `seq`.
  std::string describe_missing(int64_t seq);

 private:
  struct Announcement {
    int64_t seq = 0;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  // Frees the send buffers of announcements that have gone out.
  void reap(bool all);

  MPI_Comm ctrl_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1;
  std::deque<Announcement> announcements_;  // the announcing thread only
  std::mutex mu_;
  std::vector<int64_t> arrived_;  // highest collective each rank announced
};

}  // namespace zerod
