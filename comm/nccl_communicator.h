// Collectives over NCCL on GPU buffers, run on a comm stream of their own.
//
// Buffers are device pointers on this rank's GPU. Each collective first
// waits (on the GPU, not the host) for the work queued so far on the compute
// stream, so it sees what the compute produced; Work::wait() blocks the host
// until the collective is complete on the GPU. Collectives are issued from
// one thread at a time; wait() may be called from any.
#pragma once

#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "runtime/core/device.h"
#ifdef ZEROD_WITH_MPI
#include "comm/rank_env.h"
#endif

namespace zerod {

// The bytes of an ncclUniqueId, so that includers need no nccl.h. One rank
// makes it and every rank of the job must be given the same one.
struct NcclId {
  char bytes[128];
};

class NcclCommunicator : public Communicator {
 public:
  // The CUDA stream whose queued work every later collective waits for
  // (until set, the legacy default stream). Set it to the stream the buffers
  // are produced on, so compute there overlaps the comm stream.
  virtual void set_compute_stream(Stream& stream) = 0;
};

absl::StatusOr<NcclId> make_nccl_id();

// Joins the job as `rank` of `world_size` on GPU local_rank % device count;
// blocks until every rank has joined. A collective still incomplete after
// `timeout` fails and breaks the communicator.
absl::StatusOr<std::unique_ptr<NcclCommunicator>> make_nccl_communicator(int rank, int world_size, int local_rank,
                                                                         const NcclId& id,
                                                                         std::chrono::milliseconds timeout);

#ifdef ZEROD_WITH_MPI
// As above, with the id made on rank 0 and broadcast over MPI_COMM_WORLD
// (MPI is initialised if nobody has, and then finalized with the
// communicator); MPI's view of the world must agree with `rank`.
absl::StatusOr<std::unique_ptr<NcclCommunicator>> make_nccl_communicator_over_mpi(const RankInfo& rank,
                                                                                  std::chrono::milliseconds timeout);
#endif

}  // namespace zerod
